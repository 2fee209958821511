"""Traces (``app.observe.tracing``): the spans of a completion request, in-process
with the SDK's in-memory exporter in front of the scripted engine — the
server span and its ``queue`` and ``engine call`` children, the engine
call's context in the engine's ``traceparent``, a client's ``traceparent``
as the parent, and the spans of a request refused in the queue and of a
stream its client left. How the standard variables turn traces on, and
that off loads no SDK, run in subprocesses: the tracer provider is the
process's."""

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from app.observe.tracing import tracing_wanted
from deploy.local import ROOT
from tests.support.asgi import InProcessGateway, in_process_gateway
from tests.support.asgi_streams import open_stream
from tests.support.keys import key_entry, write_keys_file
from tests.support.scripted_engine import DONE, MODEL, chunk, usage_chunk
from tests.support.wait import wait_for

COMPLETIONS = "/v1/completions"
STREAM = {"model": MODEL, "prompt": "hello", "max_tokens": 8, "stream": True}
CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Every span ended during the test (the SDK installed once per process)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def named(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in spans.get_finished_spans() if span.name == name]


def only(spans: InMemorySpanExporter, name: str) -> ReadableSpan:
    (span,) = named(spans, name)
    return span


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


async def ended(spans: InMemorySpanExporter, name: str) -> ReadableSpan:
    """The server span ends as the request's flight ends, after its last byte."""
    await wait_for(lambda: bool(named(spans, name)), timeout=30)
    return only(spans, name)


async def stream_to_its_end(gateway: InProcessGateway, headers: dict[str, str]) -> str:
    """One stream answered whole; returns the engine's ``traceparent``."""
    exchange = gateway.request(COMPLETIONS, STREAM, headers=headers)
    call = await gateway.engine.calls.get()
    call.stream()
    call.send(chunk("a") + chunk("b", "length") + usage_chunk(3, 2) + DONE)
    call.end()
    await exchange.done()
    assert exchange.status == 200
    return call.headers.get("traceparent", "")


async def test_a_stream_is_a_server_span_over_its_queue_and_engine_call(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    keys = write_keys_file(tmp_path / "keys.yaml", [key_entry("acme-1", "acme", "key-acme")])
    async with in_process_gateway(keys_file=keys) as gateway:
        headers = {"authorization": "Bearer key-acme"}
        traceparent = await stream_to_its_end(gateway, headers)
        server = await ended(spans, "POST /v1/completions")
    queue, call = only(spans, "queue"), only(spans, "engine call")

    assert (server.kind, server.parent) == (SpanKind.SERVER, None)
    assert parent_id(queue) == parent_id(call) == server.context.span_id
    assert {queue.context.trace_id, call.context.trace_id} == {server.context.trace_id}
    # The engine's parent is the engine call: vLLM's span becomes its child.
    version, trace_id, span_id, flags = traceparent.split("-")
    assert (trace_id, span_id) == (f"{call.context.trace_id:032x}", f"{call.context.span_id:016x}")
    assert (version, int(flags, 16) & 1) == ("00", 1)  # sampled
    assert call.kind == SpanKind.CLIENT
    assert call.attributes is not None
    assert call.attributes["gateway.engine"] == gateway.engine.url

    assert queue.attributes is not None
    assert queue.attributes["gateway.queue.outcome"] == "admitted"
    assert queue.attributes["gateway.engine"] == gateway.engine.url
    assert queue.attributes["gateway.route.reason"] == "policy"

    told = dict(server.attributes or {})
    assert told["http.route"] == COMPLETIONS
    assert told["gen_ai.request.model"] == MODEL
    assert (told["gateway.tenant"], told["gateway.priority"]) == ("acme", "normal")
    assert told["gateway.key_id"] == "acme-1"
    assert "key-acme" not in json.dumps(told)
    assert (told["http.response.status_code"], told["gateway.outcome"]) == (200, "completed")
    assert (told["gen_ai.usage.input_tokens"], told["gen_ai.usage.output_tokens"]) == (3, 2)
    assert isinstance(told["gateway.queue_s"], float)
    assert isinstance(told["gateway.ttft_s"], float)
    assert [event.name for event in server.events] == ["first token"]
    # The server span holds its children in time.
    assert server.start_time is not None
    assert server.end_time is not None
    for child in (queue, call):
        assert child.start_time is not None
        assert child.end_time is not None
        assert server.start_time <= child.start_time <= child.end_time <= server.end_time


async def test_a_client_traceparent_is_the_server_span_parent(spans: InMemorySpanExporter) -> None:
    client = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
    async with in_process_gateway() as gateway:
        traceparent = await stream_to_its_end(gateway, {"traceparent": client})
        server = await ended(spans, "POST /v1/completions")
    assert server.parent is not None
    assert server.parent.is_remote
    assert f"{server.context.trace_id:032x}" == CLIENT_TRACE
    assert f"{server.parent.span_id:016x}" == CLIENT_SPAN
    assert traceparent.startswith(f"00-{CLIENT_TRACE}-")
    assert CLIENT_SPAN not in traceparent


async def test_a_request_not_sampled_tells_the_engine_so(spans: InMemorySpanExporter) -> None:
    """Unsampled here (its client says so), the engine gets the unsampled
    context: left without one, vLLM would start a trace of its own."""
    client = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-00"
    async with in_process_gateway() as gateway:
        traceparent = await stream_to_its_end(gateway, {"traceparent": client})
    assert traceparent.startswith(f"00-{CLIENT_TRACE}-")
    assert traceparent.endswith("-00")
    assert not named(spans, "POST /v1/completions")


async def test_a_request_refused_in_the_queue_has_spans_that_say_so(
    spans: InMemorySpanExporter,
) -> None:
    # One sequence at a time: a second request waits its queue timeout, refused.
    async with in_process_gateway(max_concurrency=1, queue_timeout=0.5) as gateway:
        held, call = await open_stream(gateway)
        refused = await gateway.request(COMPLETIONS, STREAM).done()
        assert refused.status == 429
        server = await ended(spans, "POST /v1/completions")
        call.send(DONE)
        call.end()
        await held.done()
    (queue,) = [span for span in named(spans, "queue") if parent_id(span) == server.context.span_id]
    assert queue.attributes is not None
    assert queue.attributes["gateway.queue.outcome"] == "refused"
    assert queue.attributes["gateway.reason"] == "queue_timeout"
    told = dict(server.attributes or {})
    assert (told["gateway.outcome"], told["gateway.reason"]) == ("rejected", "queue_timeout")
    assert told["http.response.status_code"] == 429
    assert told["gateway.retry_after_s"] == pytest.approx(float(refused.headers["retry-after"]))
    assert not [
        span for span in named(spans, "engine call") if parent_id(span) == server.context.span_id
    ]


async def test_a_stream_its_client_left_has_spans_that_say_so(spans: InMemorySpanExporter) -> None:
    async with in_process_gateway() as gateway:
        exchange, call = await open_stream(gateway)
        call.send(chunk("a"))
        await exchange.wait_for(lambda e: b'"a"' in e.body)
        exchange.disconnect()
        await exchange.done()
        server = await ended(spans, "POST /v1/completions")
        await call.wait_closed()
    told = dict(server.attributes or {})
    assert (told["gateway.outcome"], told["gateway.phase"]) == ("cancelled", "streaming")
    assert told["http.response.status_code"] == 499
    (cancelled,) = [event for event in server.events if event.name == "cancelled"]
    assert cancelled.attributes == {"gateway.phase": "streaming"}
    engine_call = only(spans, "engine call")
    assert engine_call.attributes is not None
    assert engine_call.attributes["gateway.call.outcome"] == "abandoned"


# --- configuration ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, False),
    ],
)
def test_traces_are_on_when_the_standard_variables_name_an_exporter(
    environ: dict[str, str], wanted: bool
) -> None:
    assert tracing_wanted(environ) is wanted


def run(probe: str, **environ: str) -> str:
    names = [name for name in os.environ if name.startswith("OTEL_")]
    env = {k: v for k, v in os.environ.items() if k not in names} | environ
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


OFF = f"""
import sys
from opentelemetry import trace
from opentelemetry.propagate import inject
import app.serve.run
from app.observe.tracing import RequestTrace, start_tracing
assert start_tracing() is None
client = {{"traceparent": "00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}}
request = RequestTrace(client, "/v1/completions", 0)
request.enter()
with request.engine_call("http://e:8000", "/v1/completions", 1):
    headers = {{}}
    inject(headers)
loaded = [m for m in sys.modules if m.startswith(("opentelemetry.sdk.trace", "opentelemetry.exp"))]
print(sorted(loaded), type(trace.get_tracer_provider()).__name__, headers)
"""


def test_off_by_default_no_tracing_sdk_is_loaded_and_nothing_goes_to_the_engine() -> None:
    # (The SDK's metrics may be loaded by the Redis client, its tracing is not.)
    assert run(OFF) == "[] ProxyTracerProvider {}"


ON = """
from opentelemetry import trace
from app.observe.tracing import start_tracing
provider = start_tracing()
print(provider.resource.attributes["service.name"], provider.sampler.get_description())
provider.shutdown()
"""


def test_on_the_service_is_named_and_the_sampler_is_parent_based_always_on() -> None:
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    assert run(ON, **endpoint).startswith("vllm-gateway ParentBased{root:AlwaysOnSampler,")
    named_service = run(ON, OTEL_SERVICE_NAME="edge", **endpoint)
    assert named_service.startswith("edge ")


def test_a_protocol_other_than_http_protobuf_is_refused_at_start() -> None:
    with pytest.raises(subprocess.CalledProcessError) as refused:
        run(ON, OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4317", OTEL_EXPORTER_OTLP_PROTOCOL="grpc")
    assert "http/protobuf only" in refused.value.stderr


OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


async def test_the_latency_histograms_carry_a_traced_requests_trace_id_in_openmetrics(
    spans: InMemorySpanExporter,
) -> None:
    client = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
    async with in_process_gateway() as gateway:
        await stream_to_its_end(gateway, {"traceparent": client})
        await ended(spans, "POST /v1/completions")
        asked = await gateway.request(
            "/metrics", b"", method="GET", headers={"accept": OPENMETRICS}
        ).done()
        plain = await gateway.request("/metrics", b"", method="GET").done()
    assert asked.headers["content-type"].startswith("application/openmetrics-text")
    exemplar = f'# {{trace_id="{CLIENT_TRACE}"}}'
    for histogram in ("gateway_time_to_first_token_seconds", "gateway_request_duration_seconds"):
        marked = [
            line
            for line in asked.body.decode().splitlines()
            if line.startswith(f"{histogram}_bucket") and exemplar in line
        ]
        assert marked, f"no {histogram} bucket carries the trace id"
    # Prometheus's text format has no exemplars; it stays the default.
    assert plain.headers["content-type"].startswith("text/plain")
    assert "trace_id" not in plain.body.decode()


async def test_an_untraced_request_leaves_no_exemplar(spans: InMemorySpanExporter) -> None:
    # A request the sampler drops (its client says not sampled) is not traced.
    client = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-00"
    async with in_process_gateway() as gateway:
        await stream_to_its_end(gateway, {"traceparent": client})
        await wait_for(lambda: gateway.metric("gateway_requests_total") >= 1, timeout=30)
        asked = await gateway.request(
            "/metrics", b"", method="GET", headers={"accept": OPENMETRICS}
        ).done()
    assert "trace_id" not in asked.body.decode()
