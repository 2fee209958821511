"""A request's class reaches the engine, in-process against a scripted
engine: where the engines order by priority, each request carries its
class's priority where vLLM reads it on its route (the ``X-Vllm-Priority``
header, or the body's ``priority``); where they do not, nothing is sent and
a client's own ``priority`` is stripped either way. That vLLM orders by it
is tests/e2e/test_classes.py's."""

from typing import Any

import pytest

from tests.support.asgi import in_process_gateway
from tests.support.scripted_engine import MODEL, EngineCall

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
EMBED = {"model": MODEL, "input": "hi"}


def whole(call: EngineCall) -> None:
    usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    call.answer(200, {"id": "x", "object": "list", "choices": [], "data": [], "usage": usage})


async def sent(path: str, body: dict[str, Any], priority: str, **settings: Any) -> EngineCall:
    async with in_process_gateway(**settings) as gateway:
        exchange = gateway.request(path, body, headers={"x-priority": priority})
        call = await gateway.engine.calls.get()
        whole(call)
        await exchange.done()
        assert exchange.status == 200
        return call


@pytest.mark.parametrize(("priority", "engine"), [("high", "-1"), ("normal", "0"), ("low", "1")])
async def test_a_chat_carries_its_class_in_the_header_vllm_reads(
    priority: str, engine: str
) -> None:
    call = await sent(
        "/v1/chat/completions", {**CHAT, "priority": -100}, priority, engine_scheduling="priority"
    )
    assert call.headers["x-vllm-priority"] == engine
    # The client's own never reaches the engine: it would jump the classes.
    assert "priority" not in call.body


async def test_an_embedding_carries_its_class_in_the_body() -> None:
    call = await sent("/v1/embeddings", EMBED, "high", engine_scheduling="priority")
    assert call.body["priority"] == -1
    assert "x-vllm-priority" not in call.headers


async def test_engines_that_order_by_arrival_are_sent_no_priority() -> None:
    for path, body in (("/v1/chat/completions", CHAT), ("/v1/embeddings", EMBED)):
        call = await sent(path, {**body, "priority": -100}, "high")
        assert "x-vllm-priority" not in call.headers
        assert "priority" not in call.body


@pytest.mark.parametrize("header", ["x-slo-ttft-ms", "x-llm-d-slo-ttft-ms"])
@pytest.mark.parametrize("value", ["soon", "1.5", "0", "-3"])
async def test_an_objective_that_is_no_whole_number_of_ms_is_a_400_naming_its_header(
    header: str, value: str
) -> None:
    async with in_process_gateway() as gateway:
        exchange = gateway.request("/v1/chat/completions", CHAT, headers={header: value})
        await exchange.done()
        assert exchange.status == 400
        error = exchange.json()["error"]
        assert error["param"] == header
        assert header in error["message"]
        assert gateway.engine.calls.empty()
