"""The engine client, through the gateway over real connections: a kept-alive
connection the engine closed or reset as a request went out is sent again
once, on another connection, and a broken connection is an error another
engine may not have, not proof that the engine is gone."""

import pytest

from tests.support.asgi import in_process_gateway
from tests.support.scripted_engine import MODEL, ScriptedEngine, next_call

COMPLETIONS = "/v1/completions"
BODY = {"model": MODEL, "prompt": "hi", "max_tokens": 4}
ANSWER = {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}


@pytest.mark.parametrize("reset", [True, False], ids=["reset", "closed"])
async def test_a_connection_closed_or_reset_before_any_answer_is_sent_again_once(
    reset: bool,
) -> None:
    async with in_process_gateway() as gateway:
        exchange = gateway.request(COMPLETIONS, BODY)
        _, first = await next_call(gateway.engine)
        # On the connection the start-up checks left open: the engine had it
        # idle, and drops it as the request arrives, unanswered.
        assert first.kept_alive
        first.drop(reset=reset)
        _, again = await next_call(gateway.engine)
        again.answer(200, ANSWER)
        await exchange.done()
        assert exchange.status == 200, exchange.body
        assert gateway.engine.calls.empty()
        assert gateway.metric("gateway_engine_retries_total") == 0
        assert gateway.metric("gateway_engine_ejections_total") == 0


async def test_twice_is_a_broken_engine_connection_that_does_not_eject() -> None:
    a, b = ScriptedEngine(), ScriptedEngine()
    async with in_process_gateway(fleet=(a, b)) as gateway:
        exchange = gateway.request(COMPLETIONS, BODY)
        broken, first = await next_call(a, b)
        first.drop()
        same, again = await next_call(a, b)
        assert same is broken  # sent again once to the same engine
        again.drop()
        # Broken twice: a failure another engine may not have, so it goes there.
        other, last = await next_call(a, b)
        assert other is not broken
        last.answer(200, ANSWER)
        await exchange.done()
        assert exchange.status == 200, exchange.body
        assert gateway.metric("gateway_engine_retries_total") == 1
        assert gateway.metric("gateway_engine_ejections_total") == 0
        assert gateway.metric("gateway_upstream_up", engine=broken.label) == 1
        assert gateway.settled()


async def test_an_engine_that_breaks_a_request_stays_in_routing() -> None:
    async with in_process_gateway() as gateway:
        engine = gateway.engine
        exchange = gateway.request(COMPLETIONS, BODY)
        for _ in range(2):
            _, call = await next_call(engine)
            call.drop()
        await exchange.done()
        assert exchange.status == 502
        assert exchange.json()["error"]["code"] == "engine_error"
        assert gateway.metric("gateway_engine_ejections_total") == 0
        assert gateway.metric("gateway_upstream_up") == 1
        assert gateway.settled()
        # The next request goes to it, and is served.
        served = gateway.request(COMPLETIONS, BODY)
        _, call = await next_call(engine)
        call.answer(200, ANSWER)
        assert (await served.done()).status == 200
        assert engine.calls.empty()
