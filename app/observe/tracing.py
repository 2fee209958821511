"""Traces: one server span per admitted API request, with the gateway's
decisions on it and on two kinds of child span, and the engine call's
context passed to the engine in ``traceparent`` so that vLLM's own span
(``llm_request``) is the engine call's child.

The spans come from the gateway's own code: the admitted routes are
served before FastAPI's router (``app.api.entry``), where no ASGI
instrumentation would see them. A request's flight (``app.request.flight``) owns its
``RequestTrace``:

- the server span, ``POST /v1/chat/completions`` (or its route's path),
  from arrival to the end: who asked (tenant, priority, key id — never the
  key), the model, the answer's status, the outcome and its reason, the
  phase a cancellation came in, the time queued, the time to first token
  (also an event at that moment) and the tokens in and out, all read once
  from the request's record when it ends (nothing happens per token);
- ``queue``: from entering admission to being admitted or refused, with the
  engine chosen and why, or the refusal's reason and ``Retry-After``;
- ``engine call``: one per engine the request is sent to (a retry is a
  second one), from the request going out to the end of the answer.

A client's ``traceparent`` (W3C trace context) is the server span's parent;
without one the gateway starts the trace. Only the trace context goes to
the engine, never the client's other headers (baggage included).

Configured by OpenTelemetry's standard variables; off unless an OTLP
endpoint (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``)
or an exporter (``OTEL_TRACES_EXPORTER``: ``otlp``, ``console``) is named.
Off, no SDK is loaded: the API's no-op tracer hands out one invalid span
per request and every method here returns at its first line.
"""

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import Token
from typing import TYPE_CHECKING

from opentelemetry import context, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from app.request.errors import GatewayError
from app.routing.base import Choice

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from app.request.record import RequestRecord

SERVICE_NAME = "vllm-gateway"
# W3C trace context alone, whatever OTEL_PROPAGATORS says: the engine gets
# the trace's context and nothing else a client sent.
_W3C = TraceContextTextMapPropagator()
_tracer = trace.get_tracer("vllm-gateway")
_EXPORTERS = ("otlp", "console")


def tracing_wanted(environ: Mapping[str, str]) -> bool:
    """Whether the standard variables ask for traces."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return exporters != "none"
    endpoints = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
    return any(environ.get(name) for name in endpoints)


def start_tracing(environ: Mapping[str, str] = os.environ) -> "TracerProvider | None":
    """Install the SDK's tracer provider when traces are asked for (once per
    process, before serving); the caller shuts it down to send what is left.

    The SDK reads the rest itself: the endpoint, headers and timeout
    (``OTEL_EXPORTER_OTLP_*``), the sampler (``OTEL_TRACES_SAMPLER``, by
    default ``parentbased_always_on``: every request is traced unless its
    client's ``traceparent`` says not sampled), the batching (``OTEL_BSP_*``)
    and the resource (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``).
    """
    if not tracing_wanted(environ):
        return None
    names = [n.strip() for n in environ.get("OTEL_TRACES_EXPORTER", "otlp").lower().split(",")]
    unknown = [n for n in names if n and n not in _EXPORTERS]
    if unknown:
        raise ValueError(f"OTEL_TRACES_EXPORTER: {', '.join(unknown)} is not one of otlp, console")
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    if "otlp" in names and protocol != "http/protobuf":
        raise ValueError(
            f"OTLP protocol {protocol!r}: the gateway exports traces over http/protobuf only"
            " (an OpenTelemetry Collector takes both)"
        )
    # Loaded only when traces are on.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME as SERVICE_NAME_KEY
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SpanExporter,
    )

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME_KEY, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME_KEY: SERVICE_NAME}))
    provider = TracerProvider(resource=resource)
    for name in names:
        exporter: SpanExporter = OTLPSpanExporter() if name == "otlp" else ConsoleSpanExporter()
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider


def _propagates_unsampled(span: Span) -> bool:
    """Whether a request this gateway does not sample still sends its
    (unsampled) context to the engine: with the SDK installed, yes; with
    tracing off, the API's no-op tracer hands back a client's own context,
    which is not the gateway's to pass on."""
    provider = trace.get_tracer_provider()
    return span.get_span_context().is_valid and type(provider).__module__.startswith(
        "opentelemetry.sdk"
    )


def route_reason(choice: Choice | None, *, retry: bool) -> str:
    """Why the request went to its engine."""
    if retry:
        return "retry_elsewhere"
    if choice is None or choice.preferred is None:
        return "policy"
    if choice.engine == choice.preferred:
        return "affinity_hit"
    return "load_cap_override" if choice.overridden else "policy"


class QueueSpan:
    """The ``queue`` span's outcome, told by the flight."""

    def __init__(self, span: Span) -> None:
        self._span = span

    def admitted(self, engine: str, reason: str, routing: str) -> None:
        if self._span.is_recording():
            self._span.set_attributes(
                {
                    "gateway.queue.outcome": "admitted",
                    "gateway.engine": engine,
                    "gateway.route.reason": reason,
                    "gateway.routing": routing,
                }
            )


class RequestTrace:
    """The spans of one completion request (see the module's docstring)."""

    def __init__(self, headers: Mapping[str, str], path: str, arrival_wall: float) -> None:
        parent = _W3C.extract(headers) if "traceparent" in headers else None
        self._span = _tracer.start_span(
            f"POST {path}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={"http.request.method": "POST", "http.route": path, "url.path": path},
            start_time=int(arrival_wall * 1e9),
        )
        self._on = self._span.is_recording()
        self._token: Token[Context] | None = None

    @property
    def trace_id(self) -> str | None:
        """The trace's id (hex) when this request is sampled, else None."""
        if not self._on:
            return None
        return f"{self._span.get_span_context().trace_id:032x}"

    def enter(self) -> None:
        """The server span becomes the current one (the logs' trace ids)."""
        if self._on:
            self._token = context.attach(trace.set_span_in_context(self._span))

    @contextmanager
    def queue(self, *, retry: bool) -> Iterator[QueueSpan]:
        if not self._on:
            yield QueueSpan(trace.INVALID_SPAN)
            return
        span = _tracer.start_span("queue", attributes={"gateway.retry": retry})
        try:
            yield QueueSpan(span)
        except GatewayError as error:
            span.set_attributes(_refusal(error) | {"gateway.queue.outcome": "refused"})
            raise
        except BaseException:
            span.set_attribute("gateway.queue.outcome", "left")
            raise
        finally:
            span.end()

    @contextmanager
    def engine_call(self, engine: str, path: str, attempt: int) -> Iterator[Span]:
        """The engine call's span, current while the block runs: the engine
        client puts its context in the request's ``traceparent``."""
        if not self._on:
            if not _propagates_unsampled(self._span):
                yield trace.INVALID_SPAN
                return
            # Not sampled here: the engine is told so (flags 00), or it
            # would start a trace of its own for the request.
            token = context.attach(trace.set_span_in_context(self._span))
            try:
                yield trace.INVALID_SPAN
            finally:
                context.detach(token)
            return
        span = _tracer.start_span(
            "engine call",
            kind=SpanKind.CLIENT,
            attributes={
                "http.request.method": "POST",
                "url.full": engine + path,
                "gateway.engine": engine,
                "gateway.attempt": attempt,
            },
        )
        token = context.attach(trace.set_span_in_context(span))
        try:
            yield span
        except GatewayError as error:
            span.set_status(StatusCode.ERROR, error.message)
            span.set_attribute("error.type", error.code or error.reason)
            raise
        except BaseException:
            span.set_attribute("gateway.call.outcome", "abandoned")
            raise
        finally:
            context.detach(token)
            span.end()

    def answered_error(self, error: GatewayError) -> None:
        """The error the client is answered with (after its ``Retry-After`` is set)."""
        if self._on:
            self._span.set_attributes(_refusal(error))

    def end(self, record: "RequestRecord") -> None:
        """End the server span with what the ended request's record says."""
        if self._token is not None:
            context.detach(self._token)
            self._token = None
        if not self._on:
            return
        span = self._span
        span.set_attributes(_record_attributes(record))
        if record.first_token_at is not None:
            span.add_event("first token", timestamp=_epoch_ns(record, record.first_token_at))
        if record.outcome == "cancelled":
            span.add_event(
                "cancelled",
                {"gateway.phase": record.phase},
                timestamp=_epoch_ns(record, record.ended_at),
            )
        if record.status >= 500:
            span.set_status(StatusCode.ERROR, record.error or "")
        # Now, not the record's end: the flight's last steps (the engine's
        # connection closed, the capacity given back) are the request's too.
        span.end()


def _refusal(error: GatewayError) -> dict[str, str | float]:
    told: dict[str, str | float] = {"error.type": error.code or error.reason}
    if error.outcome == "rejected":
        told["gateway.reason"] = error.reason
    # The Retry-After the client is given (whole seconds), not the estimate.
    retry_after = error.headers().get("Retry-After")
    if retry_after is not None:
        told["gateway.retry_after_s"] = float(retry_after)
    return told


def _record_attributes(record: "RequestRecord") -> dict[str, str | int | float | bool]:
    def since_arrival(t: float | None) -> float | None:
        return None if t is None else round(t - record.arrival, 6)

    values: dict[str, str | int | float | bool | None] = {
        "http.response.status_code": record.status,
        "gen_ai.request.model": record.model,
        "gen_ai.usage.input_tokens": record.prompt_tokens,
        "gen_ai.usage.output_tokens": record.completion_tokens,
        "gateway.request_id": record.request_id,
        "gateway.engine_request_id": record.engine_request_id,
        "gateway.tenant": record.tenant,
        "gateway.priority": record.priority,
        "gateway.key_id": record.key_id,
        "gateway.stream": record.stream,
        "gateway.engine": record.engine,
        "gateway.tries": record.tries,
        "gateway.outcome": record.outcome,
        "gateway.reason": record.reason,
        "gateway.phase": record.phase,
        "gateway.queue_s": since_arrival(record.admitted_at),
        "gateway.ttft_s": since_arrival(record.first_token_at),
    }
    return {key: value for key, value in values.items() if value is not None}


def _epoch_ns(record: "RequestRecord", moment: float) -> int:
    """A ``perf_counter`` moment of the request as the spans' wall-clock time."""
    return int((record.arrival_wall + (moment - record.arrival)) * 1e9)
