"""The one mapping from errors to HTTP responses."""

import json

from app.request.error_responses import error_response
from app.request.errors import EngineStatusError, OverCapacity, RateLimited


def test_rejections_carry_retry_after_and_openai_shape() -> None:
    response = error_response(OverCapacity("full", reason="queue_full", retry_after=2.4))
    assert response.status_code == 429
    assert response.headers["retry-after"] == "3"
    body = json.loads(bytes(response.body))
    assert set(body["error"]) == {"message", "type", "param", "code"}


def test_extra_headers_go_out_with_the_error() -> None:
    error = RateLimited(
        "slow down", limit="tokens", retry_after=3, headers={"x-ratelimit-limit-tokens": "100"}
    )
    response = error_response(error)
    assert response.headers["x-ratelimit-limit-tokens"] == "100"
    assert response.headers["retry-after"] == "3"
    assert json.loads(bytes(response.body))["error"]["type"] == "tokens"


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
