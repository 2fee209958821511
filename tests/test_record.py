"""Request records end exactly once and count their outcome."""

from app.errors import Draining, UpstreamTimeout
from app.metrics import GatewayMetrics
from app.record import RequestRecord, Telemetry
from tests.support.asgi import sample


def count(metrics: GatewayMetrics, name: str, **labels: str) -> float:
    return sample(metrics.registry, name, **labels)


def make(metrics: GatewayMetrics) -> RequestRecord:
    return RequestRecord("id", "chat", "t", "normal", Telemetry(metrics))


def test_the_first_outcome_wins() -> None:
    metrics = GatewayMetrics()
    record = make(metrics)
    assert record.finish("completed", status=200)
    assert not record.cancel()
    assert not record.fail(UpstreamTimeout("late"))
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
