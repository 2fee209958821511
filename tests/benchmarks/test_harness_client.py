"""The benchmark client's reading of a call (``benchmarks.harness.client``):
the gateway's arrival to admission from the head it sends, and the residual
left once that is taken out. No engine."""

from app.observe.metrics import GatewayMetrics
from app.request.record import RequestRecord, Telemetry
from benchmarks.harness import Call
from benchmarks.harness.client import queue_wait


def test_the_queue_wait_is_read_from_the_head_the_gateway_sends() -> None:
    record = RequestRecord("id", "chat", Telemetry(GatewayMetrics()), tenant="t", priority="normal")
    record.admitted_at = record.arrival + 1.25
    header = record.timing_headers(None)["server-timing"]
    assert queue_wait(header) == 1.25
    # Not admitted yet (a refusal's head): no queue metric.
    record.admitted_at = None
    assert queue_wait(record.timing_headers(None)["server-timing"]) is None


def test_a_head_without_the_queue_metric_says_none() -> None:
    assert queue_wait(None) is None
    assert queue_wait("") is None
    assert queue_wait('head;dur=3.0;desc="arrival to this head"') is None
    assert queue_wait("queue;dur=abc") is None
    assert queue_wait("cache;desc=hit, queue ; dur=20") == 0.02


def test_the_relays_residual_leaves_out_what_it_held_the_request_back() -> None:
    held = Call(status=200, started=0.0, first_token=6.0, engine_time=0.5, gateway_queue=5.0)
    assert held.residual == 5.5
    assert held.relay_residual == 0.5
    # A relay without a queue, or a call without the engine's figures.
    assert Call(status=200, started=0.0, first_token=1.0, engine_time=0.75).relay_residual == 0.25
    assert Call(status=200, started=0.0, first_token=1.0, gateway_queue=0.5).relay_residual is None
