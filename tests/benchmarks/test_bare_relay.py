"""The overhead benchmark's floor (``benchmarks.overhead.bare_relay``):
in front of the real engine, it passes a stream and a refusal through as the
engine sent them."""

from collections.abc import Mapping

import httpx

from benchmarks.overhead.bare_relay import BareRelay
from tests.support.engines import MODEL, Engine


async def _post(engine: Engine, body: Mapping[str, object]) -> httpx.Response:
    relay = BareRelay(engine.url)
    transport = httpx.ASGITransport(app=relay)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://relay") as client:
            return await client.post("/v1/chat/completions", json=body, timeout=120)
    finally:
        await relay.aclose()


async def test_a_stream_comes_back_as_the_engine_sent_it(engine: Engine) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say something."}],
        "max_tokens": 8,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    answer = await _post(engine, body)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    events = [e for e in answer.text.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    # The usage chunk (the last before [DONE]) counts what the chunks before it carried.
    assert '"completion_tokens":8' in events[-2]
    assert sum('"content"' in e for e in events[:-2]) >= 2


async def test_a_refusal_comes_back_with_its_status(engine: Engine) -> None:
    body = {"model": "no-such-model", "messages": [{"role": "user", "content": "x"}]}
    answer = await _post(engine, body)
    assert answer.status_code == 404
    assert answer.headers["content-type"].startswith("application/json")
    assert "no-such-model" in answer.text
