"""The request's owner (``app.request.flight``): how a relayed stream ends — the
engine breaking or stalling, the client leaving, the drain's deadline — and
the one retry rule: an engine that fails a request before any byte reached
the client hands it to another, once; one that refuses connections is
ejected first. In-process, with admission on: each request ends in one
outcome, closes the engine's response and leaves nothing queued, in flight
or reserved."""

import json

import pytest

from app.admission.controller import AdmissionController
from app.serve.drain import Drain
from tests.support.asgi import Exchange, in_process_gateway
from tests.support.asgi_streams import STREAM, final_error, open_stream
from tests.support.scripted_engine import DONE, MODEL, ScriptedEngine, chunk, next_call, usage_chunk
from tests.support.wait import wait_for

COMPLETIONS = "/v1/completions"
BODY = {"model": MODEL, "prompt": "hello", "max_tokens": 8}


# --- how a stream ends ----------------------------------------------------------


@pytest.mark.parametrize(
    ("failure", "code"),
    [("resets", "engine_error"), ("falls-silent", "engine_timeout")],
    ids=["engine-dies", "idle-timeout"],
)
async def test_an_engine_failure_mid_stream_ends_with_one_error_event(
    failure: str, code: str
) -> None:
    # Silent past the read timeout (short here); otherwise never timed out.
    read_timeout = 0.5 if failure == "falls-silent" else 3600
    async with in_process_gateway(upstream_read_timeout=read_timeout) as gateway:
        exchange, call = await open_stream(gateway)
        call.send(chunk("a"))
        await exchange.wait_for(lambda e: b'"a"' in e.body)
        if failure == "resets":
            call.drop()
        await exchange.done()
        assert final_error(exchange)["code"] == code
        assert gateway.metric("gateway_requests_total", outcome="failed") == 1
        await call.wait_closed()
        assert gateway.settled()


async def test_the_client_leaving_mid_stream_is_a_cancellation() -> None:
    async with in_process_gateway() as gateway:
        exchange, call = await open_stream(gateway)
        call.send(chunk("a"))
        await exchange.wait_for(lambda e: b'"a"' in e.body)
        exchange.disconnect()
        await exchange.done()
        assert gateway.metric("gateway_cancellations_total", phase="streaming") == 1
        await call.wait_closed()
        assert gateway.settled()


async def test_the_drain_deadline_ends_a_stream_whose_engine_is_silent() -> None:
    drain = Drain()
    async with in_process_gateway(drain=drain) as gateway:
        exchange, call = await open_stream(gateway)
        call.send(chunk("a"))
        await exchange.wait_for(lambda e: b'"a"' in e.body)
        drain.begin()
        drain.stop_streams()
        # No further byte from the engine: the error event goes out anyway.
        await exchange.done()
        assert final_error(exchange)["code"] == "draining"
        assert not exchange.messages[-1].get("more_body")
        assert gateway.metric("gateway_requests_total", outcome="failed") == 1
        await call.wait_closed()
        assert gateway.settled()


async def test_a_stream_still_waiting_for_its_engine_at_the_deadline_is_answered_at_once() -> None:
    drain = Drain()
    async with in_process_gateway(drain=drain) as gateway:
        exchange = gateway.request("/v1/completions", STREAM)
        call = await gateway.engine.calls.get()
        # The engine has not answered the request's headers yet: the drain's
        # deadline does not wait for them.
        drain.stop_streams()
        await exchange.done()
        assert exchange.status == 503
        assert json.loads(exchange.body)["error"]["code"] == "draining"
        # The engine's call was given up: the gateway closed its connection
        # before the engine answered.
        await call.wait_closed()
        assert gateway.metric("gateway_requests_total", outcome="failed") == 1
        assert gateway.settled()


# --- the retry rule -------------------------------------------------------------


async def test_a_stream_the_first_engine_breaks_before_its_first_event_goes_to_the_other() -> None:
    a, b = ScriptedEngine(), ScriptedEngine()
    async with in_process_gateway(fleet=(a, b)) as gateway:
        exchange = gateway.request(COMPLETIONS, {**BODY, "stream": True})
        first, call = await next_call(a, b)
        call.stream()
        call.drop(reset=False)  # the engine's process ends: its connections closed
        second, retry = await next_call(a, b)
        assert second is not first
        retry.stream()
        retry.send(chunk("x") + DONE)
        retry.end()
        await exchange.done()
        assert b"error" not in exchange.body
        assert exchange.body.endswith(DONE)
        assert gateway.metric("gateway_requests_total", outcome="completed") == 1
        assert gateway.metric("gateway_engine_retries_total") == 1
        await call.wait_closed()
        assert gateway.settled()


async def test_after_the_first_event_a_broken_engine_ends_the_stream() -> None:
    a, b = ScriptedEngine(), ScriptedEngine()
    async with in_process_gateway(fleet=(a, b)) as gateway:
        exchange = gateway.request(COMPLETIONS, {**BODY, "stream": True})
        _, call = await next_call(a, b)
        call.stream()
        call.send(chunk("x"))
        await exchange.wait_for(lambda e: b'"x"' in e.body)
        call.drop(reset=False)
        await exchange.done()
        assert json.loads(exchange.body.split(b"\n\n")[-2][6:])["error"]["code"] == "engine_error"
        assert a.calls.empty()
        assert b.calls.empty()
        assert gateway.metric("gateway_engine_retries_total") == 0
        assert gateway.settled()


async def test_a_refused_connection_ejects_the_engine_and_the_call_goes_elsewhere() -> None:
    fleet = (ScriptedEngine(), ScriptedEngine())
    async with in_process_gateway(fleet=fleet) as gateway:
        # a is routing's first choice (on a tie, the lower URL), and goes down
        # after the monitors' first checks (the next is an hour away): a
        # request is what finds it down.
        a, b = sorted(fleet, key=lambda engine: engine.url)
        assert await wait_for(lambda: a.requests["/metrics"] >= 2, timeout=30)
        await a.go_down()
        served: list[Exchange] = []
        for _ in range(2):
            exchange = gateway.request(COMPLETIONS, BODY)
            engine, call = await next_call(a, b)
            assert engine is b
            call.answer(200, {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
            served.append(await exchange.done())
        assert [e.status for e in served] == [200, 200]
        assert gateway.metric("gateway_upstream_up", engine=a.label) == 0
        assert gateway.metric("gateway_engine_ejections_total", engine=a.label) >= 1
        # Readmitted once a check passes again.
        await a.come_back()
        await gateway.services.engines.monitors[a.url].check()
        assert gateway.metric("gateway_upstream_up", engine=a.label) == 1


async def test_a_non_streaming_5xx_is_retried_once_elsewhere_and_not_twice() -> None:
    a, b = ScriptedEngine(), ScriptedEngine()
    async with in_process_gateway(fleet=(a, b)) as gateway:
        exchange = gateway.request(COMPLETIONS, BODY)
        _, call = await next_call(a, b)
        call.answer(500, {"error": {"message": "engine bug"}})
        _, retry = await next_call(a, b)
        retry.answer(503, {"error": {"message": "busy too"}})
        await exchange.done()
        assert exchange.status == 503
        assert a.calls.empty()
        assert b.calls.empty()
        assert gateway.metric("gateway_requests_total", outcome="failed") == 1
        assert gateway.settled()


# --- its place in the engine's batch ------------------------------------------------


async def test_a_completed_stream_teaches_its_engine_the_tokens_an_event_carries() -> None:
    """Four tokens (the engine's usage) in two events: the engine's streams
    count two tokens an event from then on (the first stream's ratio, the
    mean of the first streams), also those already streaming; a stream cut
    short teaches nothing."""
    async with in_process_gateway() as gateway:
        admission = gateway.services.admission
        assert isinstance(admission, AdmissionController)
        (budget,) = admission.policy.engines.values()
        exchange, call = await open_stream(gateway, max_tokens=4)
        call.send(chunk("ab") + chunk("cd", finish="length"))
        call.send(usage_chunk(3, 4) + DONE)
        call.end()
        await exchange.done()
        assert budget.itl.tokens_per_event == pytest.approx(2.0)
        cut, call = await open_stream(gateway, max_tokens=4)
        call.send(chunk("ab"))
        await cut.wait_for(lambda e: b'"ab"' in e.body)
        call.drop()
        await cut.done()
        assert budget.itl.tokens_per_event == pytest.approx(2.0)
        assert gateway.settled()


async def test_a_stream_on_a_paced_engine_tells_its_admission_how_far_it_has_come() -> None:
    """On an engine whose cache binds (48 blocks), a stream's place among
    its engine's paced starts follows its relay: nothing before its first
    token, then the tokens sent and the time since; completed, it gives the
    engine's step and leaves the paced starts (``app.admission.pace``)."""
    async with in_process_gateway(kv_blocks=48, kv_block_size=128) as gateway:
        admission = gateway.services.admission
        assert isinstance(admission, AdmissionController)
        (budget,) = admission.policy.engines.values()
        exchange, call = await open_stream(gateway, max_tokens=40)
        (entry,) = budget.pace.open
        assert entry.seen() is None
        call.send(chunk("a") + chunk("b"))
        await exchange.wait_for(lambda e: b'"b"' in e.body)
        seen = entry.seen()
        assert seen is not None
        assert seen[0] == 2
        assert seen[1] >= 0
        call.send(chunk("c", finish="length") + usage_chunk(3, 40) + DONE)
        call.end()
        await exchange.done()
        assert budget.pace.open == []
        assert budget.pace.completed_step is not None
        assert gateway.settled()
