"""The one mapping from errors to responses and SSE events."""

import json

from app.errors import (
    EngineStatusError,
    OverCapacity,
    UpstreamTimeout,
    error_response,
    sse_error_event,
)


def test_rejections_carry_retry_after_and_openai_shape() -> None:
    response = error_response(OverCapacity("full", reason="queue_full", retry_after=2.4))
    assert response.status_code == 429
    assert response.headers["retry-after"] == "2"
    body = json.loads(bytes(response.body))
    assert set(body["error"]) == {"message", "type", "param", "code"}


def test_engine_errors_in_openai_shape_pass_through_unchanged() -> None:
    content = (
        b'{"error":{"message":"bad temperature","type":"BadRequestError",'
        b'"param":"temperature","code":400}}'
    )
    response = error_response(EngineStatusError(400, content))
    assert response.status_code == 400
    assert bytes(response.body) == content


def test_engine_errors_in_other_shapes_are_wrapped() -> None:
    error = EngineStatusError(500, b"Internal Server Error")
    body = json.loads(bytes(error_response(error).body))
    assert body["error"]["message"] == "engine answered 500"
    assert error.outcome == "failed"


def test_a_stream_error_is_one_data_event() -> None:
    event = sse_error_event(UpstreamTimeout("idle"))
    assert event.startswith(b"data: {")
    assert event.endswith(b"\n\n")
    assert event.count(b"\n\n") == 1
    assert json.loads(event[6:])["error"]["code"] == "engine_timeout"
