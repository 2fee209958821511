"""One record per request that reaches an API route, ended exactly once.

The record travels with the request through validation, admission and the
relay. Whoever ends the request calls ``finish`` with its outcome; the first
call wins, counts the outcome in the metrics and writes the access-log line.
"""

import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Literal

from app.errors import GatewayError, Outcome
from app.metrics import GatewayMetrics

Phase = Literal["receiving", "queued", "waiting_first_token", "streaming", "non_streaming"]

access_log = logging.getLogger("gateway.access")


class Telemetry:
    """Where finished records go: the outcome metrics and the access log."""

    def __init__(self, metrics: GatewayMetrics) -> None:
        self.metrics = metrics

    def record(self, rec: "RequestRecord") -> None:
        m = self.metrics
        assert rec.outcome is not None
        m.requests.labels(rec.route, rec.outcome).inc()
        if rec.outcome == "rejected":
            m.rejections.labels(rec.reason or "invalid").inc()
        elif rec.outcome == "cancelled":
            m.cancellations.labels(rec.phase).inc()
        if rec.outcome in ("completed", "cancelled"):
            if rec.prompt_tokens:
                m.tokens.labels("prompt").inc(rec.prompt_tokens)
            if rec.completion_tokens:
                m.tokens.labels("completion").inc(rec.completion_tokens)
        m.duration.labels(rec.route, rec.outcome).observe(rec.ended_at - rec.arrival)
        access_log.info("request finished", extra={"fields": rec.log_fields()})


@dataclass(eq=False)
class RequestRecord:
    request_id: str
    route: str
    tenant: str
    priority: str
    telemetry: Telemetry
    arrival: float = field(default_factory=time.perf_counter)
    arrival_wall: float = field(default_factory=time.time)
    # The id the engine sees: made by the gateway, so two clients that send
    # the same X-Request-Id never share an engine request.
    engine_request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    key_id: str | None = None
    stream: bool = False
    phase: Phase = "receiving"
    admitted_at: float | None = None
    first_token_at: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    outcome: Outcome | None = None
    reason: str | None = None
    status: int = 0
    ended_at: float = 0.0
    error: str | None = None
    # Set by the SSE response when the client's disconnect message arrives, so
    # a stream torn down by a disconnect is told apart from one torn down by
    # the gateway itself (a slow reader dropped, a forced shutdown).
    client_gone: bool = False

    @property
    def finished(self) -> bool:
        return self.outcome is not None

    def finish(
        self, outcome: Outcome, *, status: int, reason: str | None = None, error: str | None = None
    ) -> bool:
        """End the request; returns False (and changes nothing) if it had already ended."""
        if self.outcome is not None:
            return False
        self.outcome = outcome
        self.status = status
        self.reason = reason
        self.error = error
        self.ended_at = time.perf_counter()
        self.telemetry.record(self)
        return True

    def fail(self, error: GatewayError) -> bool:
        return self.finish(
            error.outcome,
            status=error.status,
            reason=error.reason if error.outcome == "rejected" else None,
            error=error.message,
        )

    def cancel(self) -> bool:
        return self.finish("cancelled", status=499)

    def log_fields(self) -> dict[str, object]:
        def since_arrival(t: float | None) -> float | None:
            return None if t is None else round(t - self.arrival, 4)

        return {
            "request_id": self.request_id,
            "engine_request_id": self.engine_request_id,
            "key_id": self.key_id,
            "arrival_ts": round(self.arrival_wall, 4),
            "route": self.route,
            "tenant": self.tenant,
            "priority": self.priority,
            "stream": self.stream,
            "status": self.status,
            "outcome": self.outcome,
            "reason": self.reason,
            "phase": self.phase,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "queue_s": since_arrival(self.admitted_at),
            "ttft_s": since_arrival(self.first_token_at),
            "total_s": since_arrival(self.ended_at),
            "error": self.error,
        }
