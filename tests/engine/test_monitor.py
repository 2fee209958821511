"""The engine monitor never lies quietly: missing series are counted and
logged, admission falls back, and a broken check cannot freeze health; a
check that is late while the engine's answers flow ejects nothing."""

import asyncio
from collections.abc import Callable

import pytest

from tests.support.asgi import in_process_gateway
from tests.support.scripted_engine import MODEL, ScriptedEngine, chunk

BODY = {"model": MODEL, "prompt": "hi", "max_tokens": 4, "stream": True}


async def test_missing_series_are_a_gauge_a_log_line_and_a_conservative_fallback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = ScriptedEngine(metrics_text="# renamed in an upgrade\nvllm:other 1\n")
    async with in_process_gateway(engine, fallback_max_sequences=1) as gateway:
        assert gateway.metric("gateway_engine_stats_missing") == 3
        assert any("lacks vllm:cache_config_info" in r.getMessage() for r in caplog.records)
        # Capacity unknown: one sequence at a time, the second waits.
        first = gateway.request("/v1/completions", BODY)
        call = await gateway.engine.calls.get()
        call.stream()
        second = gateway.request("/v1/completions", BODY)
        for _ in range(1000):
            if gateway.metric("gateway_queue_depth") == 1:
                break
            await asyncio.sleep(0)
        assert gateway.metric("gateway_queue_depth") == 1
        assert gateway.engine.calls.empty()
        first.disconnect()
        second.disconnect()
        await first.done()
        await second.done()


async def test_a_check_that_breaks_marks_the_engine_down_and_the_loop_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with in_process_gateway(health_interval=0.05) as gateway:
        (monitor,) = gateway.services.engines.monitors.values()
        assert monitor.up
        calls = 0

        async def broken() -> None:
            nonlocal calls
            calls += 1
            raise RuntimeError("a bug in a check")

        monkeypatch.setattr(monitor, "check", broken)
        await _until(lambda: calls >= 3)
        assert not monitor.up
        assert gateway.metric("gateway_upstream_up") == 0


async def test_a_stale_answer_counts_as_down_but_the_last_engine_is_still_routed_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with in_process_gateway(health_interval=0.05) as gateway:
        (monitor,) = gateway.services.engines.monitors.values()
        assert monitor.up

        async def hangs() -> None:
            await asyncio.sleep(3600)

        monkeypatch.setattr(monitor, "check", hangs)
        await _until(lambda: not monitor.up)
        assert not monitor.up
        # A doubt, not a death: not ejected, and with no engine up, offered.
        assert gateway.services.engines.up_engines() == [monitor]
        assert gateway.metric("gateway_engine_ejections_total") == 0
        assert gateway.metric("gateway_upstream_up") == 1


async def test_a_check_late_while_answers_flow_ejects_nothing_and_one_late_in_silence_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with in_process_gateway(health_interval=0.05, health_timeout=1.0) as gateway:
        (monitor,) = gateway.services.engines.monitors.values()
        engine = gateway.engine
        stream = gateway.request("/v1/completions", BODY)
        call = await engine.calls.get()
        call.stream()
        engine.answer_health_late()  # busy: every check times out from now on
        late_from = engine.requests["/health"]
        # Three checks timed out while the stream's tokens kept arriving.
        async with asyncio.timeout(60):
            while engine.requests["/health"] < late_from + 4:
                call.send(chunk("tok"))
                await asyncio.sleep(0.05)
        assert monitor.up
        assert gateway.metric("gateway_engine_ejections_total") == 0
        # The stream goes quiet: a late check is now a hung engine.
        await _until(lambda: monitor.ejected)
        assert gateway.metric("gateway_engine_ejections_total") == 1
        assert gateway.services.engines.up_engines() == []
        downs = [r for r in caplog.records if "DOWN (ejected)" in r.getMessage()]
        assert len(downs) == 1
        stream.disconnect()
        await stream.done()


async def _until(check: Callable[[], bool], timeout: float = 60) -> None:
    """Poll while the monitor's own loop runs (real time: it sleeps), until
    ``check`` holds (``TimeoutError`` after ``timeout`` seconds)."""
    async with asyncio.timeout(timeout):
        while not check():  # noqa: ASYNC110 - the condition has no event to wait on
            await asyncio.sleep(0.05)
