"""Scale from zero on ``/metrics``: the requests held for an engine to come up,
by model — what an autoscaler reads to start the first engine of a pool at
zero (KEDA's ``activationThreshold``: deploy/k8s) — and how long starts
took. Series exist only for the models ``GATEWAY_COLD_MODELS`` names."""

from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Gauge, Histogram

# From a warm node (seconds) to a large model's weights pulled and loaded.
_START_BUCKETS = (5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900, 1800)


class ColdStartSeries:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.held = Gauge(
            "gateway_requests_held",
            "Requests held in the queue for an engine to come up for their model (scale from"
            " zero).",
            ["model"],
            registry=registry,
        )
        self.started = Histogram(
            "gateway_cold_start_seconds",
            "From the first request held for a model no engine served to an engine serving"
            " it being up.",
            ["model"],
            buckets=_START_BUCKETS,
            registry=registry,
        )

    def known(self, models: Iterable[str]) -> None:
        """Make the series of the configured cold models (0 until used)."""
        for model in models:
            self.held.labels(model)
            self.started.labels(model)

    def publish(self, models: Iterable[str], held: Mapping[str, int]) -> None:
        for model in models:
            self.held.labels(model).set(held.get(model, 0))
