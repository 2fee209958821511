"""Errors as data: their outcome, reason and final SSE event."""

import json

import pytest

from app.errors import (
    EngineStatusError,
    OverCapacity,
    RateLimited,
    UpstreamTimeout,
    sse_error_event,
)


def test_an_engine_4xx_is_the_clients_error_and_a_5xx_a_failure() -> None:
    refused = EngineStatusError(400, b'{"error": {"message": "bad temperature"}}')
    assert (refused.outcome, refused.reason) == ("rejected", "engine_invalid")
    broken = EngineStatusError(500, b"Internal Server Error")
    assert broken.outcome == "failed"
    assert EngineStatusError(429, b"").outcome == "failed"


def test_a_stream_error_is_one_data_event() -> None:
    event = sse_error_event(UpstreamTimeout("idle"))
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
