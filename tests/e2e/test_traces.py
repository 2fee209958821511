"""One trace from the client into the engine, read back from the real trace
backend: the gateway's server span, its engine call and vLLM's own
``llm_request`` span, parent to grandchild.

The session's engine exports to the session's backend (tests/conftest.py);
each gateway here exports to it over OTLP/HTTP. Spans arrive with their
exporters' batches, so every test waits for the spans it names.
"""

from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI

from tests.support.engines import MODEL, Engine
from tests.support.gateways import Gateway, StartGateway, access_log
from tests.support.streams import hold_streams, open_stream, read_content_chunks
from tests.support.trace_backend import (
    Span,
    TraceBackend,
    client_traceparent,
    one,
    span_id,
    tree,
)

SERVER = "POST /v1/chat/completions"
COMPLETIONS = "POST /v1/completions"


def attribute(span: Span, key: str) -> Any:
    """A span attribute by its dotted name (flat, or nested as some
    backends store dotted names)."""
    attributes = span["attributes"]
    if key in attributes:
        return attributes[key]
    value: Any = attributes
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


@pytest.fixture
def traced_gateway(
    idle_engine: Engine, trace_backend: TraceBackend, start_gateway: StartGateway
) -> Gateway:
    return start_gateway(idle_engine.url, environ=trace_backend.gateway_environ())


async def test_a_streamed_request_is_one_trace_from_the_gateway_into_the_engine(
    traced_gateway: Gateway, trace_backend: TraceBackend
) -> None:
    async with AsyncOpenAI(
        base_url=f"{traced_gateway.url}/v1", api_key="unused", max_retries=0
    ) as client:
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Tell me about paged memory."}],
            max_tokens=16,
            stream=True,
            # The random-weight model may end at its first token otherwise.
            extra_body={"ignore_eos": True},
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text
    # No traceparent sent: the gateway started the trace, and its access
    # log line says which.
    (line,) = [entry for entry in access_log(traced_gateway) if entry.get("route") == "chat"]
    trace_id = line["trace_id"]

    spans = trace_backend.wait_for_trace(trace_id, {SERVER, "queue", "engine call", "llm_request"})
    server, queue = one(spans, SERVER), one(spans, "queue")
    call, engine = one(spans, "engine call"), one(spans, "llm_request")
    picture = tree(spans)
    assert server["parent_id"] is None, picture
    assert queue["parent_id"] == span_id(server), picture
    assert call["parent_id"] == span_id(server), picture
    assert engine["parent_id"] == span_id(call), picture
    # The access-log line names the span it was written in: the request
    # ends inside its engine call.
    assert line["span_id"] in {span_id(server), span_id(call)}

    assert attribute(server, "gateway.outcome") == "completed"
    assert attribute(server, "http.response.status_code") == 200
    assert attribute(server, "gen_ai.request.model") == MODEL
    assert 0 <= attribute(server, "gateway.queue_s") <= attribute(server, "gateway.ttft_s")
    assert attribute(server, "gen_ai.usage.output_tokens") == line["completion_tokens"]
    assert "first token" in [event["name"] for event in server["events"]]
    assert attribute(queue, "gateway.queue.outcome") == "admitted"
    assert attribute(queue, "gateway.engine") == attribute(call, "gateway.engine")
    # vLLM's own view of the same request.
    assert attribute(engine, "gen_ai.latency.time_to_first_token") is not None
    assert attribute(engine, "gen_ai.latency.time_in_queue") is not None
    print(f"\ntrace {trace_id}\n{picture}")


async def test_a_clients_traceparent_is_the_gateways_parent(
    traced_gateway: Gateway, trace_backend: TraceBackend
) -> None:
    header, trace_id, parent = client_traceparent()
    async with httpx.AsyncClient(base_url=traced_gateway.url, timeout=120) as http:
        answer = await http.post(
            "/v1/completions",
            json={"model": MODEL, "prompt": "The river", "max_tokens": 4},
            headers={"traceparent": header},
        )
    assert answer.status_code == 200
    spans = trace_backend.wait_for_trace(trace_id, {COMPLETIONS, "engine call", "llm_request"})
    server = one(spans, COMPLETIONS)
    assert server["parent_id"] == parent, tree(spans)
    assert one(spans, "llm_request")["parent_id"] == span_id(one(spans, "engine call"))


async def test_a_request_cancelled_mid_stream_has_spans_that_say_so(
    traced_gateway: Gateway, trace_backend: TraceBackend
) -> None:
    header, trace_id, _ = client_traceparent()
    body = {"model": MODEL, "prompt": "The river", "max_tokens": 1500, "ignore_eos": True}
    async with (
        httpx.AsyncClient(base_url=traced_gateway.url, timeout=120) as http,
        open_stream(http, body, traceparent=header) as response,
    ):
        assert response.status_code == 200
        await read_content_chunks(response, 5)
    spans = trace_backend.wait_for_trace(trace_id, {COMPLETIONS, "engine call"})
    server = one(spans, COMPLETIONS)
    assert attribute(server, "gateway.outcome") == "cancelled", tree(spans)
    assert attribute(server, "gateway.phase") == "streaming"
    (cancelled,) = [event for event in server["events"] if event["name"] == "cancelled"]
    assert attribute(cancelled, "gateway.phase") == "streaming"
    assert attribute(one(spans, "engine call"), "gateway.call.outcome") == "abandoned"


async def test_a_request_refused_in_the_queue_has_spans_that_say_so(
    idle_engine: Engine, trace_backend: TraceBackend, start_gateway: StartGateway
) -> None:
    # One sequence at a time and a 1 s deadline in the queue: while one
    # long stream runs, a second request waits in the queue and is refused.
    gateway = start_gateway(
        idle_engine.url, environ=trace_backend.gateway_environ(), max_concurrency=1, queue_timeout=1
    )
    header, trace_id, _ = client_traceparent()
    long = {"model": MODEL, "prompt": "Hold", "max_tokens": 1500, "ignore_eos": True}
    async with httpx.AsyncClient(base_url=gateway.url, timeout=120) as http:
        # Its headers in, its body unread: it holds the only slot until closed.
        (holding,) = await hold_streams(http, gateway.url, long, 1)
        try:
            assert holding.status_code == 200
            refused = await http.post(
                "/v1/completions",
                json={"model": MODEL, "prompt": "Wait", "max_tokens": 4},
                headers={"traceparent": header},
            )
        finally:
            await holding.aclose()
    assert refused.status_code == 429
    spans = trace_backend.wait_for_trace(trace_id, {COMPLETIONS, "queue"})
    server, queue = one(spans, COMPLETIONS), one(spans, "queue")
    (line,) = [entry for entry in access_log(gateway) if entry.get("trace_id") == trace_id]
    assert attribute(queue, "gateway.queue.outcome") == "refused", tree(spans)
    assert attribute(queue, "gateway.reason") == line["reason"]
    assert attribute(queue, "gateway.retry_after_s") == float(refused.headers["Retry-After"])
    assert attribute(server, "gateway.outcome") == "rejected"
    assert attribute(server, "http.response.status_code") == 429
    assert [span["name"] for span in spans if span["name"] == "engine call"] == []


def test_the_backend_forgets_traces_after_a_week_by_default(trace_backend: TraceBackend) -> None:
    """A trace store that never forgets fills its disk (deploy/traces/run.sh,
    ``TRACES_RETENTION_DAYS``)."""
    assert trace_backend.retention_days() == 7
