"""Errors as data: their outcome, reason, OpenAI type, Retry-After and final
SSE event."""

import json

import pytest

from app.observe.metrics import GatewayMetrics
from app.request.error_responses import error_event
from app.request.errors import (
    REJECTION_REASONS,
    EngineStatusError,
    GatewayError,
    OverCapacity,
    PoolExhausted,
    RateLimited,
    StoppedByShutdown,
    UpstreamFailed,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from app.serve.drain import Drain
from tests.support.asgi import in_process_gateway
from tests.support.scripted_engine import MODEL, ScriptedEngine
from tests.support.wait import wait_for

BODY = {"model": MODEL, "prompt": "hello", "max_tokens": 8}


def test_an_engine_4xx_is_the_clients_error_and_a_5xx_a_failure() -> None:
    refused = EngineStatusError(400, b'{"error": {"message": "bad temperature"}}')
    assert (refused.outcome, refused.reason) == ("rejected", "engine_invalid")
    broken = EngineStatusError(500, b"Internal Server Error")
    assert broken.outcome == "failed"
    assert EngineStatusError(429, b"").outcome == "failed"


def test_a_stream_error_is_one_data_event() -> None:
    event = error_event(UpstreamTimeout("idle"))
    assert event.startswith(b"data: {")
    assert event.endswith(b"\n\n")
    assert event.count(b"\n\n") == 1
    assert json.loads(event[6:])["error"]["code"] == "engine_timeout"


@pytest.mark.parametrize(
    ("seconds", "header"), [(2.0, "2"), (2.01, "3"), (2.4, "3"), (2.6, "3"), (0.2, "1"), (0.0, "1")]
)
def test_retry_after_is_whole_seconds_rounded_up(seconds: float, header: str) -> None:
    """A client that waits what it is told is never early."""
    capacity = OverCapacity("full", reason="queue_full", retry_after=seconds)
    assert capacity.headers()["Retry-After"] == header
    limited = RateLimited("slow down", limit="tokens", retry_after=seconds, headers={})
    assert limited.headers()["Retry-After"] == header


def _subclasses(cls: type[GatewayError]) -> list[type[GatewayError]]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def test_every_rejection_reason_has_its_series_from_the_start() -> None:
    classes = [c for c in _subclasses(GatewayError) if c is not OverCapacity]
    rejected = {c.reason for c in classes if c.outcome == "rejected"}
    # Set per instance: capacity's three reasons, an engine's own 4xx.
    rejected |= {
        "queue_full",
        "queue_forecast",
        "queue_timeout",
        EngineStatusError(400, b"").reason,
    }
    assert rejected == set(REJECTION_REASONS)
    registry = GatewayMetrics().registry
    series = {
        s.labels["reason"]
        for family in registry.collect()
        for s in family.samples
        if s.name == "gateway_rejections_total"
    }
    assert series == set(REJECTION_REASONS)


def test_what_the_retry_rule_reads_is_the_errors_own() -> None:
    # Gone (not reachable): tried elsewhere, and ejected.
    assert (UpstreamUnreachable("x").retryable, UpstreamUnreachable("x").ejects) == (True, True)
    # Broken, busy or slow: tried elsewhere, not ejected (a reset kept-alive
    # connection is no proof the engine is gone).
    assert (UpstreamFailed("x").retryable, UpstreamFailed("x").ejects) == (True, False)
    assert (UpstreamTimeout("x").retryable, UpstreamTimeout("x").ejects) == (True, False)
    assert (EngineStatusError(503, b"").retryable, EngineStatusError(503, b"").ejects) == (
        True,
        False,
    )
    assert EngineStatusError(429, b"").retryable
    # The request's own fault, the gateway's own pool, the shutdown: nowhere better.
    assert not EngineStatusError(400, b"").retryable
    assert not PoolExhausted("x").retryable
    assert not StoppedByShutdown("x").retryable
    assert not OverCapacity("x", reason="queue_full", retry_after=1).retryable


def test_every_5xx_is_openais_server_error() -> None:
    classes: list[type[GatewayError]] = [GatewayError, *_subclasses(GatewayError)]
    for cls in classes:
        if cls.status >= 500:
            assert cls.type == "server_error", cls
    assert EngineStatusError(500, b"not json").type == "server_error"


async def test_a_503_for_an_engine_gone_after_admission_says_when_to_come_back() -> None:
    engine = ScriptedEngine()
    async with in_process_gateway(engine, retry_after_unavailable=7) as gateway:
        # Up when checked; its process gone by the time the request goes out.
        assert await wait_for(lambda: engine.requests["/metrics"] >= 2, timeout=30)
        await engine.go_down()
        exchange = await gateway.request("/v1/completions", BODY).done()
        assert exchange.status == 503
        assert exchange.json()["error"]["code"] == "engine_unavailable"
        assert exchange.headers["retry-after"] == "7"


async def test_a_503_at_the_drains_deadline_says_when_to_come_back() -> None:
    drain = Drain()
    async with in_process_gateway(drain=drain, retry_after_unavailable=7) as gateway:
        exchange = gateway.request("/v1/completions", {**BODY, "stream": True})
        await gateway.engine.calls.get()
        drain.stop_streams()  # the engine has not answered yet
        await exchange.done()
        assert exchange.status == 503
        assert exchange.json()["error"]["code"] == "draining"
        assert exchange.headers["retry-after"] == "7"
