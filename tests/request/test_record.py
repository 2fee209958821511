"""Request records end exactly once, count their outcome and log one line."""

import logging

import pytest

from app.observe.metrics import GatewayMetrics
from app.request.errors import Draining, UpstreamTimeout
from app.request.record import EngineTiming, RequestRecord, Telemetry
from tests.support.asgi import in_process_gateway, sample
from tests.support.scripted_engine import MODEL, ScriptedEngine, next_call


def count(metrics: GatewayMetrics, name: str, **labels: str) -> float:
    return sample(metrics.registry, name, **labels)


def make(metrics: GatewayMetrics) -> RequestRecord:
    return RequestRecord("id", "chat", Telemetry(metrics), tenant="t", priority="normal")


def test_the_first_outcome_wins_and_is_reported_once() -> None:
    metrics = GatewayMetrics()
    record = make(metrics)
    assert not record.report()
    assert record.finish("completed", status=200)
    assert count(metrics, "gateway_requests_total") == 0
    assert not record.cancel()
    assert not record.fail(UpstreamTimeout("late"))
    assert record.report()
    assert not record.report()
    assert record.outcome == "completed"
    assert count(metrics, "gateway_requests_total") == 1


def test_rejections_and_cancellations_are_broken_out() -> None:
    metrics = GatewayMetrics()
    rejected = make(metrics)
    rejected.fail(Draining("bye", retry_after=5))
    cancelled = make(metrics)
    cancelled.phase = "streaming"
    cancelled.cancel()
    failed = make(metrics)
    failed.fail(UpstreamTimeout("slow"))
    for record in (rejected, cancelled, failed):
        record.report()
    assert count(metrics, "gateway_rejections_total", reason="draining") == 1
    assert count(metrics, "gateway_cancellations_total", phase="streaming") == 1
    assert count(metrics, "gateway_requests_total", outcome="failed") == 1
    assert count(metrics, "gateway_rejections_total") == 1


def test_the_access_log_line_has_no_headers() -> None:
    record = make(GatewayMetrics())
    record.finish("completed", status=200)
    fields = record.log_fields()
    assert fields["request_id"] == "id"
    assert fields["outcome"] == "completed"
    assert not any("auth" in key.lower() for key in fields)


def test_per_tenant_series_only_for_keyed_requests() -> None:
    metrics = GatewayMetrics()
    anonymous = make(metrics)
    anonymous.fail(Draining("bye", retry_after=5))
    anonymous.report()
    assert anonymous.log_fields()["retry_after_s"] == 5
    keyed = RequestRecord("id", "chat", Telemetry(metrics), tenant="acme", priority="normal")
    keyed.key_id = "acme-1"
    keyed.charged_tokens, keyed.used_tokens = 100, 40
    keyed.finish("completed", status=200)
    keyed.report()
    assert count(metrics, "gateway_tenant_rejections_total") == 0
    assert count(metrics, "gateway_tenant_tokens_total", tenant="acme", kind="admitted") == 100
    assert count(metrics, "gateway_tenant_tokens_total", tenant="acme", kind="used") == 40
    assert count(metrics, "gateway_tenant_tokens_total", tenant="t") == 0


async def test_the_access_log_names_the_model_the_engine_and_a_retry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, b = ScriptedEngine(), ScriptedEngine()
    body = {"model": MODEL, "prompt": "hello", "max_tokens": 8}
    answer = {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}
    async with in_process_gateway(fleet=(a, b)) as gateway:
        caplog.set_level(logging.INFO, logger="gateway.access")
        exchange = gateway.request("/v1/completions", body)
        first, call = await next_call(a, b)
        call.answer(500, {"error": {"message": "engine bug"}})
        second, retry = await next_call(a, b)
        retry.answer(200, answer)
        assert (await exchange.done()).status == 200
    (line,) = [r.fields for r in caplog.records if r.name == "gateway.access"]  # type: ignore[attr-defined]
    served = second.label
    assert first is not second
    assert (line["model"], line["engine"], line["retried"]) == (MODEL, served, True)


async def test_a_model_list_request_has_its_access_log_line_and_no_outcome(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with in_process_gateway() as gateway:
        caplog.set_level(logging.INFO, logger="gateway.access")
        listed = await gateway.request("/v1/models", b"", method="GET").done()
        assert listed.status == 200
        assert gateway.metric("gateway_requests_total") == 0
    (line,) = [r.fields for r in caplog.records if r.name == "gateway.access"]  # type: ignore[attr-defined]
    assert (line["route"], line["status"]) == ("models", 200)
    assert line["total_s"] >= 0


def test_what_the_path_added_is_its_time_less_the_engines() -> None:
    """A stream: admission to its first token here, less the engine's queue
    and time to first token; a whole answer: admission to its end, less all
    the engine's time; nothing without the engine's figures."""
    stream = make(GatewayMetrics())
    stream.stream = True
    stream.arrival, stream.admitted_at, stream.first_token_at = 10.0, 10.5, 11.0
    stream.finish("completed", status=200)
    assert stream.added_s is None
    stream.timed_by_engine(EngineTiming(queue=0.1, first_token=0.3, generation=2.0))
    assert stream.added_s == pytest.approx(0.1)
    whole = make(GatewayMetrics())
    whole.arrival, whole.admitted_at = 10.0, 10.5
    whole.timed_by_engine(EngineTiming(queue=0.1, first_token=0.3, generation=2.0))
    whole.finish("completed", status=200)
    whole.ended_at = 13.0
    assert whole.added_s == pytest.approx(0.1)
    whole.timed_by_engine(None)  # a later chunk without figures keeps them
    assert whole.engine_timing is not None


def test_a_completed_request_is_counted_where_the_engine_timed_it_and_missed_where_not() -> None:
    metrics = GatewayMetrics()
    timed, untimed = make(metrics), make(metrics)
    timed.timed_by_engine(EngineTiming(queue=0.0, first_token=0.0, generation=0.0))
    for record in (timed, untimed):
        record.finish("completed", status=200)
        record.report()
    assert count(metrics, "gateway_added_latency_seconds_count", route="chat") == 1
    assert count(metrics, "gateway_engine_timing_missing_total", route="chat") == 1
    assert timed.log_fields()["added_s"] is not None
    assert untimed.log_fields()["added_s"] is None


def test_server_timing_says_the_queue_and_the_head() -> None:
    record = make(GatewayMetrics())
    assert list(record.timing_headers(None)) == ["server-timing"]
    assert "queue;" not in record.timing_headers(None)["server-timing"]
    record.admitted_at = record.arrival + 0.25
    headers = record.timing_headers("https://app.example")
    assert headers["server-timing"].startswith("queue;dur=250.0, head;dur=")
    assert headers["timing-allow-origin"] == "https://app.example"
