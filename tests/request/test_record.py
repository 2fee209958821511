"""Request records end exactly once, count their outcome and log one line."""

import logging

import pytest

from app.observe.metrics import GatewayMetrics
from app.request.errors import Draining, UpstreamTimeout
from app.request.record import RequestRecord, Telemetry
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
