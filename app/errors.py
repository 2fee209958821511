"""Every error the gateway answers with, and the one place that turns an error
into an HTTP response or into a final SSE event.

Each error knows its OpenAI-shaped body, its HTTP status, whether it is a
``rejected`` outcome (refused before the engine saw the request) or a
``failed`` one (went wrong after admission), and, for rejections, the
``reason`` label of ``gateway_rejections_total``.
"""

import json
from typing import Any, Literal

from starlette.responses import JSONResponse, Response

Outcome = Literal["completed", "rejected", "cancelled", "failed"]


class GatewayError(Exception):
    status: int = 500
    type: str = "internal_error"
    code: str | None = None
    outcome: Outcome = "failed"
    reason: str = "internal"

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.retry_after = retry_after

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def headers(self) -> dict[str, str]:
        if self.retry_after is None:
            return {}
        return {"Retry-After": str(max(1, round(self.retry_after)))}


# --- refused before the engine saw the request ---------------------------


class InvalidRequest(GatewayError):
    status = 400
    type = "invalid_request_error"
    outcome = "rejected"
    reason = "invalid"


class ModelNotFound(InvalidRequest):
    status = 404
    code = "model_not_found"


class BodyTooLarge(InvalidRequest):
    status = 413
    code = "request_too_large"
    reason = "too_large"


class OverCapacity(GatewayError):
    """Admission refused: the queue is full or the request's deadline passed."""

    status = 429
    type = "rate_limit_error"
    code = "over_capacity"
    outcome = "rejected"

    def __init__(self, message: str, *, reason: str, retry_after: float) -> None:
        super().__init__(message, retry_after=retry_after)
        self.reason = reason


class EngineUnavailable(GatewayError):
    status = 503
    type = "service_unavailable"
    code = "engine_unavailable"
    outcome = "rejected"
    reason = "unavailable"


class Draining(GatewayError):
    status = 503
    type = "service_unavailable"
    code = "draining"
    outcome = "rejected"
    reason = "draining"


# --- went wrong after admission -------------------------------------------


class UpstreamFailed(GatewayError):
    """The engine went away or broke the protocol while serving the request."""

    status = 502
    type = "upstream_error"
    code = "engine_error"


class UpstreamUnreachable(UpstreamFailed):
    """Admitted, but the engine could not be reached."""

    status = 503
    code = "engine_unavailable"


class UpstreamTimeout(UpstreamFailed):
    status = 504
    type = "timeout_error"
    code = "engine_timeout"


class StoppedByShutdown(UpstreamFailed):
    """The gateway's drain grace period ran out while this request was in flight."""

    status = 503
    type = "service_unavailable"
    code = "draining"


class EngineStatusError(UpstreamFailed):
    """The engine answered with an error status; its body is passed on as is
    when it is already OpenAI-shaped."""

    def __init__(self, status: int, content: bytes, retry_after: float | None = None) -> None:
        parsed = _openai_error(content)
        message = parsed["error"]["message"] if parsed else f"engine answered {status}"
        super().__init__(str(message), retry_after=retry_after)
        self.status = status
        self.content = content if parsed else None
        if parsed:
            self.type = str(parsed["error"].get("type") or self.type)


def _openai_error(content: bytes) -> dict[str, Any] | None:
    try:
        parsed = json.loads(content)
    except ValueError:
        return None
    if (
        isinstance(parsed, dict)
        and isinstance(parsed.get("error"), dict)
        and "message" in parsed["error"]
    ):
        return parsed
    return None


# --- the one mapping to the wire ------------------------------------------


def error_response(error: GatewayError) -> Response:
    headers = error.headers()
    if isinstance(error, EngineStatusError) and error.content is not None:
        return Response(
            error.content, status_code=error.status, headers=headers, media_type="application/json"
        )
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


def sse_error_event(error: GatewayError) -> bytes:
    """The final event of a stream that cannot go on: one ``data:`` line with
    the error object, as OpenAI's own streams do."""
    payload = json.dumps(error.body(), separators=(",", ":"))
    return b"data: " + payload.encode() + b"\n\n"
