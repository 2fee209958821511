"""Gauges written when the registry is read: the value a scrape sees is the
state at that scrape, and nothing is written between scrapes."""

from prometheus_client import Gauge
from prometheus_client.exposition import generate_latest

from app.observe.metrics import GatewayMetrics
from tests.support.asgi import sample


def test_a_writer_runs_before_the_gauges_it_writes_are_read() -> None:
    """A gauge registered after the writer (as every gateway metric is)
    already carries what the writer set in the same collection."""
    metrics, state = GatewayMetrics(), [3]
    gauge = Gauge("test_state", "the state", registry=metrics.registry)
    metrics.on_collect(lambda: gauge.set(state[0]))
    assert sample(metrics.registry, "test_state") == 3
    state[0] = 5
    assert b"test_state 5.0" in generate_latest(metrics.registry)


def test_writers_run_only_when_the_registry_is_read() -> None:
    metrics, calls = GatewayMetrics(), []
    metrics.on_collect(lambda: calls.append(1))
    assert calls == []
    generate_latest(metrics.registry)
    generate_latest(metrics.registry)
    assert calls == [1, 1]


def test_the_collector_claims_no_series_of_its_own() -> None:
    """Registering it took no name, and a scrape has no sample it made."""
    before = generate_latest(GatewayMetrics().registry)
    metrics = GatewayMetrics()
    metrics.on_collect(lambda: None)
    assert generate_latest(metrics.registry) == before
