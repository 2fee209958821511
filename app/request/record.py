"""One record per request that reaches an API route, ended exactly once.

The record travels with the request through validation, admission and the
relay. Whoever ends the request calls ``finish`` with its outcome; the first
call wins. The request's flight then runs what follows from the outcome and
``report``s it, once: counted in the metrics, one access-log line.
"""

import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Literal

from app.observe.metrics import GatewayMetrics
from app.request.errors import GatewayError, Outcome
from app.request.identity import Identity
from app.serve.request_id import current_request_id

Phase = Literal["receiving", "queued", "waiting_first_token", "streaming", "non_streaming"]

access_log = logging.getLogger("gateway.access")


@dataclass(frozen=True)
class EngineTiming:
    """What the engine says one request took, in seconds (vLLM's per-request
    metrics, ``--enable-per-request-metrics``): waiting in its own queue,
    from being scheduled to its first token, and from its first token to
    its last. The engine's clock starts when its core receives the request
    (after its HTTP server parsed and tokenized it)."""

    queue: float
    first_token: float
    generation: float | None = None


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
        if rec.outcome == "completed":
            added = rec.added_s
            if added is None:
                m.engine_timing_missing.labels(rec.route).inc()
            else:
                # The engine's intervals are part of the gateway's, measured on
                # another clock: a little below zero is noise, counted as none.
                m.added_latency.labels(rec.route).observe(max(0.0, added))
        if rec.outcome in ("completed", "cancelled"):
            if rec.prompt_tokens:
                m.tokens.labels("prompt").inc(rec.prompt_tokens)
            if rec.completion_tokens:
                m.tokens.labels("completion").inc(rec.completion_tokens)
        if rec.model is not None:
            m.models.record(rec.model, rec.outcome, rec.prompt_tokens, rec.completion_tokens)
        m.duration.labels(rec.route, rec.outcome).observe(
            rec.ended_at - rec.arrival, rec.exemplar()
        )
        if rec.key_id is not None and rec.tenant is not None:
            # Tenants named in the keys file only: client input never makes a series.
            if rec.outcome == "rejected":
                m.tenant_rejections.labels(rec.tenant, rec.reason or "invalid").inc()
            if rec.charged_tokens:
                m.tenant_tokens.labels(rec.tenant, "admitted").inc(rec.charged_tokens)
            if rec.used_tokens:
                m.tenant_tokens.labels(rec.tenant, "used").inc(rec.used_tokens)
        access_log.info("request finished", extra={"fields": rec.log_fields()})

    def uncounted(self, route: str, status: int, arrival: float, key_id: str | None) -> None:
        """The access-log line of an API request that has no outcome to count
        (``/v1/models``): who asked, the answer, how long it took."""
        fields = {
            "request_id": current_request_id.get(),
            "arrival_ts": round(time.time() - (time.perf_counter() - arrival), 4),
            "route": route,
            "key_id": key_id,
            "status": status,
            "total_s": round(time.perf_counter() - arrival, 4),
        }
        access_log.info("request finished", extra={"fields": fields})


@dataclass(eq=False)
class RequestRecord:
    request_id: str
    route: str
    telemetry: Telemetry
    # Who it is for: set once the request is identified (by its key, or its
    # headers when no keys are configured).
    tenant: str | None = None
    priority: str | None = None
    arrival: float = field(default_factory=time.perf_counter)
    arrival_wall: float = field(default_factory=time.time)
    # The id the engine sees: made by the gateway, so two clients that send
    # the same X-Request-Id never share an engine request.
    engine_request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    key_id: str | None = None
    # The trace it is part of (hex), when it is traced and sampled: the
    # latency histograms' exemplar.
    trace_id: str | None = None
    stream: bool = False
    # The model asked for (once the request is checked), the engine that
    # served it last and how many engines it was sent to (2: retried).
    model: str | None = None
    engine: str | None = None
    tries: int = 0
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
    # Tokens held against the key's limit (between its estimate and its worst
    # case ``worst_tokens``) from the wall-clock time ``charged_wall``, and
    # what the request used.
    charged_tokens: int = 0
    worst_tokens: int = 0
    charged_wall: float | None = None
    used_tokens: int = 0
    # What the engine says the request took (None: it did not say).
    engine_timing: EngineTiming | None = None
    # What a refused client was told (seconds of ``Retry-After``): logged
    # with each refusal, so that it can be checked after the fact.
    retry_after: float | None = None

    _reported: bool = False

    @property
    def finished(self) -> bool:
        return self.outcome is not None

    def identify(self, identity: Identity) -> None:
        self.tenant = identity.tenant
        self.priority = identity.priority
        self.key_id = identity.key_id

    def refused_key(self, tenant: str | None, key_id: str | None) -> None:
        """Its key was refused, but it is known whose it was."""
        self.tenant, self.key_id = tenant, key_id

    def checked(self, model: str, stream: bool) -> None:
        """Its body was read and checked: the model it asks for, and whether
        it streams."""
        self.model, self.stream = model, stream

    def charged(self, held: int, worst: int) -> None:
        """``held`` tokens of its key's limit were charged for it now, of a
        worst case of ``worst``."""
        self.charged_tokens, self.worst_tokens, self.charged_wall = held, worst, time.time()

    def traced(self, trace_id: str | None) -> None:
        """The trace it is part of, when sampled."""
        self.trace_id = trace_id

    def settled(self, used: int) -> None:
        """What its key was charged in the end."""
        self.used_tokens = used

    def enter(self, phase: Phase) -> None:
        """It has reached ``phase`` (where a client that leaves, leaves)."""
        self.phase = phase

    def admitted(self, engine: str, tries: int) -> None:
        """Admitted to ``engine`` (its label), the ``tries``-th engine it
        is sent to; the queue's wait is the first admission's."""
        self.engine, self.tries = engine, tries
        if self.admitted_at is None:
            self.admitted_at = time.perf_counter()

    def first_token(self, now: float) -> None:
        """Its first token came from the engine at ``now``: it streams."""
        self.first_token_at = now
        self.phase = "streaming"

    def used(self, prompt: int | None, output: int | None) -> None:
        """What the engine says it used."""
        self.prompt_tokens, self.completion_tokens = prompt, output

    def timed_by_engine(self, timing: EngineTiming | None) -> None:
        """What the engine says the request took, if it said."""
        if timing is not None:
            self.engine_timing = timing

    @property
    def added_s(self) -> float | None:
        """What everything in front of the engine's core added to the
        request beyond its wait in the gateway's queue, in seconds (None: the
        engine gave no figures). A stream: from its admission to its first
        token here, less the engine's queue and time to that token. A whole
        answer: from its admission to its end, less all the engine's time."""
        timing = self.engine_timing
        if timing is None or not self.ended_at:
            return None
        start = self.arrival if self.admitted_at is None else self.admitted_at
        engine = timing.queue + timing.first_token
        if self.stream:
            if self.first_token_at is None:
                return None
            return self.first_token_at - start - engine
        if timing.generation is None:
            return None
        return self.ended_at - start - engine - timing.generation

    def timing_headers(self, allow_origin: str | None) -> dict[str, str]:
        """``Server-Timing`` for the head sent now: its wait in the gateway's
        queue and its time from arrival to this head, in milliseconds (the
        engine's own figures come after a stream's head: in the metrics and
        the log). ``allow_origin``: who else may read them in a browser."""
        now = time.perf_counter()
        parts = []
        if self.admitted_at is not None:
            parts.append(f"queue;dur={(self.admitted_at - self.arrival) * 1000:.1f}")
        parts.append(f'head;dur={(now - self.arrival) * 1000:.1f};desc="arrival to this head"')
        headers = {"server-timing": ", ".join(parts)}
        if allow_origin:
            headers["timing-allow-origin"] = allow_origin
        return headers

    def output_at_least(self, output: int) -> None:
        """An answer cut short, without the engine's usage: what it is known
        to have generated (the engine's own count, when it came, stands)."""
        if self.completion_tokens is None and output:
            self.completion_tokens = output

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
        return True

    def report(self) -> bool:
        """Count the ended request's outcome and write its log line; False
        (and nothing done) if it was already reported."""
        if self._reported or self.outcome is None:
            return False
        self._reported = True
        self.telemetry.record(self)
        return True

    def fail(self, error: GatewayError) -> bool:
        ended = self.finish(
            error.outcome,
            status=error.status,
            reason=error.reason if error.outcome == "rejected" else None,
            error=error.message,
        )
        if ended:
            self.retry_after = error.retry_after
        return ended

    def cancel(self) -> bool:
        return self.finish("cancelled", status=499)

    def exemplar(self) -> dict[str, str] | None:
        """What a latency observation of this request carries: its trace."""
        return None if self.trace_id is None else {"trace_id": self.trace_id}

    def log_fields(self) -> dict[str, object]:
        def since_arrival(t: float | None) -> float | None:
            return None if t is None else round(t - self.arrival, 4)

        timing, added = self.engine_timing, self.added_s

        return {
            "request_id": self.request_id,
            "engine_request_id": self.engine_request_id,
            "arrival_ts": round(self.arrival_wall, 4),
            "route": self.route,
            "tenant": self.tenant,
            "priority": self.priority,
            "stream": self.stream,
            "model": self.model,
            "engine": self.engine,
            "retried": self.tries > 1,
            "status": self.status,
            "outcome": self.outcome,
            "reason": self.reason,
            "phase": self.phase,
            "key_id": self.key_id,
            "charged_tokens": self.charged_tokens or None,
            "worst_tokens": self.worst_tokens or None,
            "charged_ts": None if self.charged_wall is None else round(self.charged_wall, 4),
            "used_tokens": self.used_tokens if self.charged_wall is not None else None,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "queue_s": since_arrival(self.admitted_at),
            "ttft_s": since_arrival(self.first_token_at),
            "engine_queue_s": None if timing is None else round(timing.queue, 4),
            "engine_ttft_s": None if timing is None else round(timing.first_token, 4),
            "added_s": None if added is None else round(added, 4),
            "total_s": since_arrival(self.ended_at),
            "error": self.error,
            "retry_after_s": self.retry_after,
        }
