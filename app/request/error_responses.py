"""The one place that turns a ``GatewayError`` into what its client reads:
an HTTP response, or the final event of a stream that cannot go on, in the
shape of the route's API.

OpenAI's shape is ``{"error": {message, type, param, code}}`` (the error's
own fields, ``app.request.errors``). Anthropic's, on the Messages routes, is
``{"type": "error", "error": {type, message}}``, its ``type`` one of
Anthropic's own, chosen by what the error is. The status is the same on
every route — one refusal, one status, whatever its client's SDK —, and so
are its headers (``Retry-After``, which the ``anthropic`` SDK honours as
the ``openai`` one does). A refusal for capacity is Anthropic's
``overloaded_error`` (the service, not the key, is at its limit) and a
key's limit its ``rate_limit_error``; both are 429s here (Anthropic sends
529 for the first; the SDK retries either).
"""

import json
import math
from typing import Any

from starlette.responses import JSONResponse, Response

from app.request.errors import EngineStatusError, ErrorShape, GatewayError, OverCapacity, Overloaded

# Anthropic's error types by status, for the errors that say nothing more.
_ANTHROPIC_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def error_response(error: GatewayError, shape: ErrorShape = "openai") -> Response:
    headers = error.headers()
    if isinstance(error, EngineStatusError) and error.content is not None and error.shape == shape:
        return Response(
            error.content, status_code=error.status, headers=headers, media_type="application/json"
        )
    return JSONResponse(error_body(error, shape), status_code=error.status, headers=headers)


def error_event(error: GatewayError, shape: ErrorShape = "openai", *, named: bool = False) -> bytes:
    """The final event of a stream that cannot go on: its error object, as
    the API's own streams send it, with the wait its ``Retry-After`` would
    have said (whole seconds, ``retry_after``) where it has one, as the
    response's head went out before the error. ``named``: with an ``event:
    error`` line (a stream of named events: the Responses API's, and every
    Anthropic stream)."""
    body = error_body(error, shape)
    if error.retry_after is not None:
        body["error"]["retry_after"] = max(1, math.ceil(error.retry_after))
    payload = json.dumps(body, separators=(",", ":"))
    name = b"event: error\n" if named or shape == "anthropic" else b""
    return name + b"data: " + payload.encode() + b"\n\n"


def error_body(error: GatewayError, shape: ErrorShape) -> dict[str, Any]:
    if shape == "openai":
        return error.body()
    return {"type": "error", "error": {"type": anthropic_type(error), "message": error.message}}


def anthropic_type(error: GatewayError) -> str:
    """What Anthropic's API would call ``error``."""
    if isinstance(error, OverCapacity | Overloaded):
        return "overloaded_error"
    if isinstance(error, EngineStatusError) and error.shape == "anthropic":
        return error.type
    known = _ANTHROPIC_TYPES.get(error.status)
    if known is not None:
        return known
    return "invalid_request_error" if error.status < 500 else "api_error"
