"""Gauges written from state when they are read, not each time it changes.

Admission's gauges (the queue's depth, each engine's reservations, budget
and sequence cap) say how the policy stands. Writing them after every
change cost each request three rounds of label lookups and locked sets
under load, for values nobody reads until the next scrape. ``OnCollect``
is a collector of no metric of its own: registered first on a registry,
the registry collects it before every metric, and it calls its writers
then — so a scrape (``/metrics``, or a test reading the registry) sees the
state as it is at that moment, and a request pays nothing for it.
"""

from collections.abc import Callable

from prometheus_client.metrics_core import Metric


class OnCollect:
    def __init__(self) -> None:
        self._writers: list[Callable[[], None]] = []

    def add(self, writer: Callable[[], None]) -> None:
        """Call ``writer`` at the start of every collection from now on."""
        self._writers.append(writer)

    def describe(self) -> list[Metric]:
        # Nothing: registering it claims no name.
        return []

    def collect(self) -> list[Metric]:
        for writer in self._writers:
            writer()
        return []
