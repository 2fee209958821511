"""The Batch API on ``/metrics``: its lines by how they ended, how many run
now, and the batches under way by status (docs/batches.md)."""

from prometheus_client import CollectorRegistry, Counter, Gauge

# How a line's run ends: recorded done, in the error file, waiting to run
# again (refused for capacity or its key's rate, or no engine), or never run
# (its batch expired).
LINE_OUTCOMES = ("completed", "failed", "retried", "expired")
ACTIVE = ("validating", "in_progress", "finalizing", "cancelling")


class BatchSeries:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.lines = Counter(
            "gateway_batch_lines",
            "Lines of batches run by this gateway, by how each run ended.",
            ["outcome"],
            registry=registry,
        )
        self.in_flight = Gauge(
            "gateway_batch_lines_in_flight",
            "Lines of batches this gateway is running now (queued or on an engine).",
            registry=registry,
        )
        self.active = Gauge(
            "gateway_batches_active",
            "Batches not yet ended, by status.",
            ["status"],
            registry=registry,
        )
        for outcome in LINE_OUTCOMES:
            self.lines.labels(outcome)
        for status in ACTIVE:
            self.active.labels(status)
