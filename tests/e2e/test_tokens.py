"""``/tokenize`` and ``/detokenize`` through the gateway, against the real
engine: the same answer as the engine's own, a round trip back to the text,
and each call one access-log line."""

import httpx

from tests.support.engines import MODEL, Engine
from tests.support.gateways import Gateway, access_log
from tests.support.wait import wait_until

PROMPT = "The gateway passes tokenizer calls through to an engine."


def test_tokenize_answers_as_the_engine_does_and_detokenize_gives_the_text_back(
    engine: Engine, gateway: Gateway
) -> None:
    body = {"model": MODEL, "prompt": PROMPT}
    direct = httpx.post(f"{engine.url}/tokenize", json=body, timeout=60)
    through = httpx.post(f"{gateway.url}/tokenize", json=body, timeout=60)
    assert direct.status_code == through.status_code == 200
    assert through.json() == direct.json()
    tokens = through.json()["tokens"]
    assert through.json()["count"] == len(tokens) > 5

    back = httpx.post(
        f"{gateway.url}/detokenize", json={"model": MODEL, "tokens": tokens}, timeout=60
    )
    assert back.status_code == 200
    assert back.json()["prompt"].strip().endswith(PROMPT)

    chat = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}]}
    templated = httpx.post(f"{gateway.url}/tokenize", json=chat, timeout=60)
    assert templated.status_code == 200
    # The chat template wraps the message: more tokens than the text alone.
    assert templated.json()["count"] > len(tokens)

    def logged() -> list[dict[str, object]]:
        return [e for e in access_log(gateway) if e.get("route") in ("tokenize", "detokenize")]

    assert wait_until(lambda: len(logged()) >= 3, timeout=30)
    assert [e["route"] for e in logged()[-3:]] == ["tokenize", "detokenize", "tokenize"]
    assert [e["status"] for e in logged()[-3:]] == [200, 200, 200]


def test_an_unknown_model_is_a_404_and_the_engines_refusal_is_passed_on(gateway: Gateway) -> None:
    unknown = httpx.post(
        f"{gateway.url}/tokenize", json={"model": "nope", "prompt": "x"}, timeout=60
    )
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "model_not_found"
    refused = httpx.post(f"{gateway.url}/detokenize", json={"model": MODEL}, timeout=60)
    assert 400 <= refused.status_code < 500
    assert refused.json()["error"]["message"]
