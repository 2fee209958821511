"""Requests between arrival and admission: their bodies being read and
checked. They hold memory and a task but sit in no queue, so they are
counted (``gateway_requests_receiving``) and bounded: beyond
``GATEWAY_MAX_RECEIVING`` a new request is refused at once, before its body
is read."""

from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import Gauge

from app.request.errors import Overloaded


class Receiving:
    def __init__(self, limit: int, gauge: Gauge, retry_after: float) -> None:
        self._limit = limit
        self._gauge = gauge
        self._retry_after = retry_after
        self.count = 0

    @contextmanager
    def enter(self) -> Iterator[None]:
        if self.count >= self._limit:
            raise Overloaded(
                f"the gateway is receiving {self._limit} requests already; retry shortly",
                retry_after=self._retry_after,
            )
        self.count += 1
        self._gauge.inc()
        try:
            yield
        finally:
            self.count -= 1
            self._gauge.dec()
