"""Several engines, in-process: a request goes where it fits and to an
engine that serves its model; an engine that fails it before any byte
reached the client hands it to another, once; one that refuses connections
is ejected and readmitted."""

import asyncio
import json

import httpx

from tests.support.asgi import Exchange, in_process_gateway
from tests.support.scripted_engine import DONE, MODEL, EngineCall, ScriptedEngine, chunk

COMPLETIONS = "/v1/completions"
BODY = {"model": MODEL, "prompt": "hello", "max_tokens": 8}


def fleet(**engines: ScriptedEngine) -> dict[str, ScriptedEngine]:
    return {f"{name}:8000": engine for name, engine in engines.items()}


async def next_call(*engines: ScriptedEngine) -> tuple[ScriptedEngine, EngineCall]:
    """The next call any of ``engines`` receives."""
    while True:
        for engine in engines:
            if not engine.calls.empty():
                return engine, engine.calls.get_nowait()
        await asyncio.sleep(0)


async def test_a_stream_the_first_engine_breaks_before_its_first_event_goes_to_the_other() -> None:
    a, b = ScriptedEngine(), ScriptedEngine()
    async with in_process_gateway(fleet=fleet(a=a, b=b)) as gateway:
        exchange = gateway.request(COMPLETIONS, {**BODY, "stream": True})
        first, call = await next_call(a, b)
        call.stream()
        call.fail(httpx.RemoteProtocolError("engine died"))
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
        assert call.closed.is_set()
        assert gateway.settled()


async def test_after_the_first_event_a_broken_engine_ends_the_stream() -> None:
    a, b = ScriptedEngine(), ScriptedEngine()
    async with in_process_gateway(fleet=fleet(a=a, b=b)) as gateway:
        exchange = gateway.request(COMPLETIONS, {**BODY, "stream": True})
        _, call = await next_call(a, b)
        call.stream()
        call.send(chunk("x"))
        await exchange.wait_for(lambda e: b'"x"' in e.body)
        call.fail(httpx.RemoteProtocolError("engine died"))
        await exchange.done()
        assert json.loads(exchange.body.split(b"\n\n")[-2][6:])["error"]["code"] == "engine_error"
        assert a.calls.empty()
        assert b.calls.empty()
        assert gateway.metric("gateway_engine_retries_total") == 0
        assert gateway.settled()


async def test_a_refused_connection_ejects_the_engine_and_the_call_goes_elsewhere() -> None:
    a, b = ScriptedEngine(reachable=True), ScriptedEngine()
    async with in_process_gateway(fleet=fleet(a=a, b=b)) as gateway:
        a.reachable = False
        served: list[Exchange] = []
        for _ in range(2):
            exchange = gateway.request(COMPLETIONS, BODY)
            engine, call = await next_call(a, b)
            assert engine is b
            call.answer(200, {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
            served.append(await exchange.done())
        assert [e.status for e in served] == [200, 200]
        assert gateway.metric("gateway_upstream_up", engine="a:8000") == 0
        assert gateway.metric("gateway_engine_ejections_total", engine="a:8000") >= 1
        # Readmitted once a check passes again.
        a.reachable = True
        (monitor,) = [m for m in gateway.services.engines.monitors.values() if "a:8000" in m.url]
        await monitor.check()
        assert gateway.metric("gateway_upstream_up", engine="a:8000") == 1


async def test_a_non_streaming_5xx_is_retried_once_elsewhere_and_not_twice() -> None:
    a, b = ScriptedEngine(), ScriptedEngine()
    async with in_process_gateway(fleet=fleet(a=a, b=b)) as gateway:
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


async def test_models_are_the_union_and_each_goes_to_its_engines() -> None:
    a = ScriptedEngine(models=(MODEL,))
    b = ScriptedEngine(models=("other",))
    async with in_process_gateway(fleet=fleet(a=a, b=b)) as gateway:
        listed = await gateway.request("/v1/models", b"", method="GET").done()
        assert sorted(m["id"] for m in listed.json()["data"]) == sorted([MODEL, "other"])
        exchange = gateway.request(COMPLETIONS, {**BODY, "model": "other"})
        engine, call = await next_call(a, b)
        assert engine is b
        call.answer(200, {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
        await exchange.done()


async def test_ready_while_one_engine_is_up() -> None:
    a, b = ScriptedEngine(), ScriptedEngine(reachable=False)
    async with in_process_gateway(fleet=fleet(a=a, b=b)) as gateway:
        ready = await gateway.request("/health/ready", b"", method="GET").done()
        assert ready.status == 200
        assert ready.json()["engines_up"] == 1
