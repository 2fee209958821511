"""Errors as data: their outcome, reason and final SSE event."""

import json

from app.errors import EngineStatusError, UpstreamTimeout, sse_error_event


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
