"""vLLM's ``/tokenize`` and ``/detokenize`` through the gateway
(``app.api.tokens``), in-process: the body goes to an engine that serves the
model as sent, its answer comes back as it is, and what no engine can answer
is refused before any engine is asked."""

import pytest

from tests.support.asgi import in_process_gateway
from tests.support.scripted_engine import MODEL, ScriptedEngine, next_call


@pytest.mark.parametrize("path", ["/tokenize", "/detokenize"])
async def test_the_body_goes_to_the_engine_and_its_answer_comes_back(path: str) -> None:
    body = {"model": MODEL, "prompt": "hello", "tokens": [1, 2], "add_special_tokens": False}
    async with in_process_gateway() as gateway:
        exchange = gateway.request(path, body)
        _, call = await next_call(gateway.engine)
        assert call.path == path
        assert call.body == body
        call.answer(200, {"count": 2, "tokens": [1, 2], "max_model_len": 2048})
        await exchange.done()
        assert exchange.status == 200
        assert exchange.json() == {"count": 2, "tokens": [1, 2], "max_model_len": 2048}


async def test_an_engine_refusal_is_passed_on() -> None:
    async with in_process_gateway() as gateway:
        exchange = gateway.request("/tokenize", {"model": MODEL, "prompt": 5})
        _, call = await next_call(gateway.engine)
        error = {"error": {"message": "bad prompt", "type": "BadRequestError", "code": 400}}
        call.answer(400, error)
        await exchange.done()
        assert exchange.status == 400
        assert exchange.json()["error"]["message"] == "bad prompt"


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"model": "nope", "prompt": "x"}, 404, "model_not_found"),
        ({"prompt": "x"}, 400, None),
        (b"{not json", 400, None),
    ],
)
async def test_what_no_engine_can_answer_is_refused_here(
    body: dict[str, object] | bytes, status: int, code: str | None
) -> None:
    engine = ScriptedEngine()
    async with in_process_gateway(engine) as gateway:
        exchange = await gateway.request("/tokenize", body).done()
        assert exchange.status == status, exchange.body
        error = exchange.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["code"] == code
        assert engine.calls.empty()
