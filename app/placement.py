"""A request's place on an engine: admitted to one, its call opened there,
and — when that engine fails it before any byte of an answer reached the
client — retried once on another.

Before any byte, a retry is invisible to the client; after, it would see
tokens twice, so a failure then ends the request as it is. A stream whose
engine fails before its first event counts as "before any byte" too (only
the response headers went out, which a retry does not repeat). An engine
that refused the connection or broke it is ejected at once; one that timed
out or answered 5xx is merely avoided by the retry. The capacity held on
an engine is given back exactly once, on the engine it was held on.
"""

import anyio
import httpx
from starlette.types import Message, Receive

from app.admission.base import AdmissionRequest, Ticket
from app.engine.monitor import engine_label
from app.errors import (
    EngineStatusError,
    GatewayError,
    PoolExhausted,
    StoppedByShutdown,
    UpstreamFailed,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from app.record import RequestRecord
from app.relay.disconnect import until_disconnected
from app.relay.upstream import close_quietly
from app.services import Services


async def never() -> Message:
    """A receive channel that never says anything."""
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


def retryable(error: GatewayError) -> bool:
    """Failures another engine may not have: unreachable, broken, stalled,
    or a 5xx of its own (a 4xx is the request's fault, anywhere; a full
    connection pool is the gateway's own, for every engine)."""
    if isinstance(error, EngineStatusError):
        return error.status >= 500 or error.status == 429
    return isinstance(error, UpstreamFailed) and not isinstance(error, PoolExhausted)


def engine_is_gone(error: GatewayError) -> bool:
    """A refused or broken connection: the engine is ejected at once. A
    timeout, the gateway's own full pool, a shutdown or an engine's status
    (vLLM's 503 for its queue cap) is an engine that is busy, not gone."""
    if isinstance(error, UpstreamUnreachable):
        return True
    busy = (UpstreamTimeout, EngineStatusError, PoolExhausted, StoppedByShutdown)
    return isinstance(error, UpstreamFailed) and not isinstance(error, busy)


class Placement:
    def __init__(
        self,
        services: Services,
        request: AdmissionRequest,
        record: RequestRecord,
        receive: Receive,
    ) -> None:
        self._services = services
        self._request = request
        self._record = record
        # What tells of the client's disconnect; once a stream's response
        # watches the client itself, it is ``never``.
        self.receive = receive
        self._ticket: Ticket | None = None
        self._tried: list[str] = []

    @property
    def engine(self) -> str:
        assert self._ticket is not None
        return self._ticket.engine

    @property
    def can_retry(self) -> bool:
        return len(self._tried) < 2

    async def admit(self) -> None:
        """Wait for admission (racing the client's disconnect)."""
        services, record = self._services, self._record

        async def give_back(ticket: Ticket) -> None:
            # Admitted just as the client left.
            ticket.release(record)

        self._ticket = await until_disconnected(
            self.receive,
            lambda: services.admission.admit(self._request, record, self._tried),
            discard=give_back,
        )
        self._tried.append(self._ticket.engine)
        services.metrics.in_flight.inc()

    async def open(self, path: str, *, stream: bool) -> httpx.Response:
        """Send the request to its engine; on a retryable failure, once to
        another engine."""
        while True:
            try:
                return await until_disconnected(
                    self.receive,
                    lambda: self._services.engine.open(
                        self.engine,
                        path,
                        self._request.job.upstream_body,
                        self._record.engine_request_id,
                        stream=stream,
                    ),
                    discard=close_quietly,
                )
            except GatewayError as error:
                if not (retryable(error) and await self.move(error)):
                    raise

    async def move(self, error: GatewayError) -> bool:
        """The engine failed the request before any byte reached the client:
        release it there and admit it elsewhere. False if it was moved once
        already (or there is nowhere else to go)."""
        if not self.can_retry:
            return False
        failed, engines = self.engine, self._services.engines
        if engine_is_gone(error):
            engines.mark_down(failed)
        model = self._request.job.model
        if not any(m.url != failed and model in m.models for m in engines.up_engines()):
            return False
        self.release()
        self._services.metrics.engine_retries.labels(engine_label(failed)).inc()
        self._record.phase = "queued"
        await self.admit()
        return True

    def release(self) -> None:
        """Give the engine's capacity back (once per admission)."""
        if self._ticket is not None:
            self._services.metrics.in_flight.dec()
            self._ticket.release(self._record)
            self._ticket = None

    @property
    def held(self) -> bool:
        return self._ticket is not None
