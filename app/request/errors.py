"""Every error the gateway answers with, as plain data.

Each error knows its OpenAI-shaped body, its HTTP status and headers, the
outcome it gives the request (``rejected``: refused as the client's fault or
by policy; ``failed``: went wrong on the gateway's or the engine's side) and,
for rejections, the ``reason`` label of ``gateway_rejections_total``.

Nothing here imports the web framework: admission, keys and the relay raise
these errors; ``app.request.error_responses`` is the one place that turns them into HTTP
responses, or into the final event of a broken stream, in the shape of the
route's API (OpenAI's, or Anthropic's on the Messages routes).

``Retry-After`` is in whole seconds rounded up, at least 1: a client that
waits it out is never early. Where a refusal's state says when the request
would pass, the value is computed from it:

- ``over_capacity`` (429: the queue full, a predicted wait past the
  request's objective, or its objective passed in the queue) and ``evicted``
  (429: a running request stopped for a higher class): the admission
  policy's prediction —
  when what the fair order admits before the request will have been
  admitted, plus its own tokens, at the queue's measured drain rate (before
  a rate is measured, the fleet is assumed to turn its KV cache over every
  2 s), booked per tenant so that clients refused together come back spread
  out, at most 60 s (``app.admission.policy``);
- ``rate_limit_exceeded`` over requests or tokens per window (429): when
  enough of the key's window will have left it for the request to pass — the
  moving window's oldest request, the token log's oldest charges — in process
  or in Redis (``app.state``). OpenAI's ``x-ratelimit-reset-*`` are in
  milliseconds rounded up: for tokens, until the key's window is empty; for
  requests, until its oldest request leaves it (the number ``Retry-After``
  comes from);
- an engine's own error status: the engine's ``Retry-After``, passed on (a
  503 without one gets ``GATEWAY_RETRY_AFTER_UNAVAILABLE``).

Where nothing says when, it is a constant: ``GATEWAY_RETRY_AFTER_UNAVAILABLE``
(5 s) for 503 draining, no engine available and overloaded (too many requests
being received); 1 s for a key at its ``max_concurrent`` (which of its
requests ends first is not known), the gateway's engine connection pool
exhausted, and no engine for the model with admission off. Every 503 has
one: the engine unreachable after admission and a request cut off by the
drain's deadline get ``GATEWAY_RETRY_AFTER_UNAVAILABLE`` too. Other failures
(502, 504) carry none.

``type`` is OpenAI's where it has one — ``invalid_request_error``,
``permission_error``, ``requests``/``tokens`` for a key's limits, and
``server_error`` for every 5xx —; ``code`` says which error it is.
"""

import json
import math
from typing import Any, Literal

Outcome = Literal["completed", "rejected", "cancelled", "failed"]
# Whose API an error is written for: OpenAI's ``{"error": {message, type,
# param, code}}``, or Anthropic's ``{"type": "error", "error": {type,
# message}}`` (``app.request.error_responses``).
ErrorShape = Literal["openai", "anthropic"]
# Every ``reason`` a rejection is counted under (``gateway_rejections_total``):
# the ``reason`` of each error below whose outcome is ``rejected``.
REJECTION_REASONS = (
    "invalid",
    "too_large",
    "body_timeout",
    "unauthorized",
    "forbidden",
    "rate_limited",
    "queue_full",
    "objective_forecast",
    "objective_expired",
    "evicted",
    "overloaded",
    "unavailable",
    "cold_start",
    "draining",
    "slow_reader",
    "engine_invalid",
)


class ClientDisconnected(Exception):
    """The client went away before the gateway answered (not an error to
    answer: there is nobody left to answer)."""


class GatewayError(Exception):
    status: int = 500
    # OpenAI's ``type`` where it has one: ``server_error`` for every 5xx.
    type: str = "server_error"
    code: str | None = None
    outcome: Outcome = "failed"
    reason: str = "internal"
    # Before any byte of the answer reached the client, another engine may
    # not fail the request this way: it is tried once elsewhere.
    retryable: bool = False
    # The engine is gone (not merely busy): it is ejected at once.
    ejects: bool = False

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        retry_after: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.retry_after = retry_after
        self.extra_headers = headers or {}

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
        headers = dict(self.extra_headers)
        if self.retry_after is not None:
            headers["Retry-After"] = str(max(1, math.ceil(self.retry_after)))
        return headers


# --- refused: the client's fault, or policy ---------------------------------


class InvalidRequest(GatewayError):
    status = 400
    type = "invalid_request_error"
    outcome = "rejected"
    reason = "invalid"


class ModelNotFound(InvalidRequest):
    status = 404
    code = "model_not_found"


class TooLong(InvalidRequest):
    """A request that can never run: its prompt (plus one token) is longer
    than the model's context, or its smallest demand exceeds the KV cache.
    A 400, never a 429: retrying cannot help."""

    code = "context_length_exceeded"
    reason = "too_large"


class ResponseNotFound(InvalidRequest):
    """A Responses API response no engine is known to hold (``app.request.response_ids``)."""

    status = 404
    code = "response_not_found"

    def __init__(self, response_id: str, why: str = "") -> None:
        super().__init__(f"Response with id '{response_id}' not found{why}.", param="response_id")


class BodyTooLarge(InvalidRequest):
    status = 413
    code = "request_too_large"
    reason = "too_large"


class UnsupportedMediaType(InvalidRequest):
    status = 415
    code = "unsupported_media_type"


class BodyTimeout(InvalidRequest):
    status = 408
    code = "request_timeout"
    reason = "body_timeout"


class Unauthorized(InvalidRequest):
    status = 401
    code = "invalid_api_key"
    reason = "unauthorized"


class NotFound(InvalidRequest):
    """A path that is not served (on this port)."""

    status = 404
    code = "not_found"


class NotServed(GatewayError):
    """A route vLLM serves that the gateway does not relay: said plainly,
    with what to do instead, rather than a 404 that reads like a typo (a 5xx,
    so OpenAI's ``server_error``: the request was not at fault)."""

    status = 501
    code = "not_served"
    # Answered at the entry point, as an unknown path's 404 is: no route's
    # request, so no route's outcome.
    outcome = "rejected"
    reason = "invalid"


class MethodNotAllowed(InvalidRequest):
    status = 405
    code = "method_not_allowed"

    def __init__(self, allowed: str) -> None:
        super().__init__("Method Not Allowed", headers={"Allow": allowed})


class Forbidden(InvalidRequest):
    """A priority the key may not use. ``tenant`` and ``key_id`` say whose
    key it was (the request is refused, but it is known who asked)."""

    status = 403
    type = "permission_error"
    code = "priority_not_allowed"
    reason = "forbidden"

    def __init__(self, message: str, *, tenant: str, key_id: str, param: str | None = None):
        super().__init__(message, param=param)
        self.tenant = tenant
        self.key_id = key_id


class RateLimited(GatewayError):
    """Over one of the key's limits. ``type`` names the limit as OpenAI does
    (``requests`` or ``tokens``); ``headers`` carry ``x-ratelimit-*``."""

    status = 429
    code = "rate_limit_exceeded"
    outcome = "rejected"
    reason = "rate_limited"

    def __init__(
        self, message: str, *, limit: str, retry_after: float, headers: dict[str, str]
    ) -> None:
        super().__init__(message, retry_after=retry_after, headers=headers)
        self.type = limit


class OverCapacity(GatewayError):
    """Admission refused: the queue is full, or the request's objective would
    be missed (forecast at arrival) or passed while it waited."""

    status = 429
    type = "rate_limit_error"
    code = "over_capacity"
    outcome = "rejected"

    def __init__(self, message: str, *, reason: str, retry_after: float) -> None:
        super().__init__(message, retry_after=retry_after)
        self.reason = reason


class Evicted(GatewayError):
    """A running request of a sheddable class, stopped to make room for a
    higher class that would otherwise miss its objective; it is charged
    what it used and told when to come back."""

    status = 429
    type = "rate_limit_error"
    code = "evicted"
    outcome = "rejected"
    reason = "evicted"


class Overloaded(GatewayError):
    """More requests are being received than the gateway takes at once
    (``GATEWAY_MAX_PENDING``): refused before their bodies are read."""

    status = 503
    code = "overloaded"
    outcome = "rejected"
    reason = "overloaded"


class EngineUnavailable(GatewayError):
    status = 503
    code = "engine_unavailable"
    outcome = "rejected"
    reason = "unavailable"


class StorageUnavailable(GatewayError):
    """The Batch API's directory cannot be written or read
    (``GATEWAY_BATCH_DIR``: its permissions, its disk); the log says why."""

    status = 503
    code = "storage_unavailable"
    outcome = "failed"
    reason = "storage"


class ColdStartTimeout(GatewayError):
    """Held for an engine to come up for its model (scale from zero) longer
    than ``GATEWAY_COLD_START_TIMEOUT``; told when one should be up."""

    status = 503
    code = "cold_start_timeout"
    outcome = "rejected"
    reason = "cold_start"


class Draining(GatewayError):
    status = 503
    code = "draining"
    outcome = "rejected"
    reason = "draining"


class SlowReader(GatewayError):
    """The client stopped reading its stream; it was dropped at the send
    timeout. No response goes out (the stream had started); the record says why."""

    status = 200
    type = "timeout_error"
    code = "send_timeout"
    outcome = "rejected"
    reason = "slow_reader"


# --- failed: went wrong on the gateway's or the engine's side --------------


class InternalError(GatewayError):
    """A bug: answered, counted and logged once, never a bare 500."""

    code = "internal_error"


class FrameworkError(GatewayError):
    """An HTTP error of the web framework's own (a malformed request line,
    a route it refused), in the gateway's shape."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        # Starlette's own headers: a 405's Allow (RFC 9110).
        super().__init__(message, headers=headers)
        self.status = status
        self.type = "invalid_request_error" if status < 500 else "server_error"


class UpstreamFailed(GatewayError):
    """The engine went away or broke the protocol while serving the request.
    A broken connection is not proof the engine is gone (a kept-alive
    connection it closed as a request went out, a proxy between): another
    engine is tried, and the engine is ejected only when it cannot be reached
    (below) or fails its check."""

    status = 502
    code = "engine_error"
    retryable = True


class UpstreamUnreachable(UpstreamFailed):
    """Admitted, but the engine could not be reached: its connection refused
    or not made, as for an engine whose process is gone."""

    status = 503
    code = "engine_unavailable"
    ejects = True


class PoolExhausted(UpstreamFailed):
    """The gateway's own connection pool to the engine had no free
    connection in time: the gateway is overloaded, the engine is not down."""

    status = 503
    code = "gateway_pool_exhausted"
    # The gateway's own pool, the same for every engine.
    retryable = False


class UpstreamTimeout(UpstreamFailed):
    """The engine was reached and is slow: avoided by the retry, not ejected."""

    status = 504
    code = "engine_timeout"


class StoppedByShutdown(UpstreamFailed):
    """The gateway's drain grace period ran out while this request was in flight."""

    status = 503
    code = "draining"
    retryable = False


class EngineStatusError(UpstreamFailed):
    """The engine answered with an error status; its body is passed on as is
    when it is already in the shape the route's clients read (``shape``:
    OpenAI's, or Anthropic's as vLLM's Messages routes answer). A 4xx (other
    than 429) is the client's error — a sampling parameter the engine
    refused —, so the request counts
    as ``rejected`` with reason ``engine_invalid``. An engine that answers
    is alive (vLLM's 503 for its queue cap is a busy engine): never ejected;
    its 5xx and 429 are tried elsewhere."""

    def __init__(self, status: int, content: bytes, retry_after: float | None = None) -> None:
        parsed = _engine_error(content)
        message = parsed["error"]["message"] if parsed else f"engine answered {status}"
        super().__init__(str(message), retry_after=retry_after)
        self.status = status
        self.retryable = status >= 500 or status == 429
        self.content = content if parsed else None
        self.shape: ErrorShape | None = None
        if parsed:
            self.type = str(parsed["error"].get("type") or self.type)
            self.shape = "anthropic" if parsed.get("type") == "error" else "openai"
        if 400 <= status < 500 and status != 429:
            self.outcome = "rejected"
            self.reason = "engine_invalid"


def _engine_error(content: bytes) -> dict[str, Any] | None:
    """The engine's error body, when it is one: an ``error`` object with a
    ``message`` (OpenAI's shape, and Anthropic's inside its envelope)."""
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
