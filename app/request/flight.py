"""One API request in flight, owned by one object from arrival to end.

``serve_completion`` (``app.request.pipeline``) reads a request top to bottom inside
``async with Flight(...)``: identify, receive and validate, charge, then
``Flight.run`` admits it and answers it from an engine, whatever its route
(chat, completions, the Responses API, embeddings: each stream with its own
relay, ``app.relay.pick``). Everything the request comes to hold is the
flight's: the admission hold, the engine's response, the one retry rule, the
watchers of the client and of the drain, its spans (``app.observe.tracing``), and a
stream's head, which goes out before admission for a stream that asked for
its queue status (``app.request.queue_status``). Whatever ends the request — its answer, an
error of any stage, the client leaving, the drain's deadline, a client that
stopped reading, a bug — ends it in ``__aexit__``: the one place where the
outcome is recorded and an error answered (``app.request.error_responses`` before the
answer started, an SSE error event after), and whose one ``finally`` closes
the engine's response (so the engine aborts what it still generates), makes
sure the record has an outcome, concludes it (``_conclude``: what follows
from the outcome — the key's charge settled, the estimate taught, the
response's engine remembered, the pipeline's ``Terms.at_end`` — then the
outcome counted and logged), gives the capacity back, leaves the drain and
ends the request's span. Each happens once. A request that ends with its
answer is concluded as soon as the outcome is known, before the client
sees the answer's end.

The retry: an engine that fails the request before any byte of the answer
reached the client — a stream whose engine fails before its first event
counts, only the headers went out and a retry does not repeat them — with
an error another engine may not have (``GatewayError.retryable``) gives the
request back; it is admitted once more, elsewhere, and an engine the error
says is gone (``GatewayError.ejects``) is ejected first. After a byte, a
retry would show tokens twice, so the request ends as it is. A request
pinned to one engine (a continued response) has nowhere else to go.

The watchers run from admission to the end, in one task group whose main
body is the request's own work: cancelling it closes the engine connection
in the task that opened it, and the ``finally`` closes it whatever ended
the request.
"""

import logging
import time
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType

import anyio
from anyio.abc import TaskGroup
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Send

from app.admission.base import AdmissionRequest, Hold
from app.engine.client import EngineResponse
from app.engine.monitor import engine_label
from app.observe.logs import left_unfinished
from app.observe.tracing import RequestTrace, route_reason
from app.relay.pick import relay_for
from app.relay.sse import StreamSender
from app.relay.stream import StreamRelay
from app.relay.usage import take_answer
from app.request.error_responses import error_event, error_response
from app.request.errors import (
    ClientDisconnected,
    GatewayError,
    InternalError,
    SlowReader,
    StoppedByShutdown,
)
from app.request.queue_status import asked, reporting
from app.request.record import RequestRecord
from app.request.routes import ROUTES
from app.request.terms import Terms
from app.request.validation import Route
from app.routing.base import RouteRequest
from app.routing.filters import eligible
from app.serve.request_id import HEADER
from app.serve.services import Services

log = logging.getLogger("gateway")

# How long the final error event of a stream that cannot go on may take to go out.
_FAREWELL_SECONDS = 2.0


class Flight:
    def __init__(self, request: Request, route: Route, services: Services, send: Send) -> None:
        request_id: str = request.state.request_id
        self._route = ROUTES[route]
        # An alias goes to the engine as the client asked for it.
        asked = request.scope["path"]
        self._engine_path = asked if asked in self._route.aliases else self._route.engine_path
        self.record = RequestRecord(request_id, route, services.telemetry)
        self.trace = RequestTrace(request.headers, self._engine_path, self.record.arrival_wall)
        self.record.traced(self.trace.trace_id)
        self._services = services
        self._request = request
        self._send = send
        # On every answer; the terms' headers (rate limits) on a success only.
        self._headers = {HEADER: request_id}
        self._terms = Terms()
        self._concluded = False
        self._admission: AdmissionRequest | None = None
        self._hold: Hold | None = None
        self._tried: list[str] = []
        self._upstream: EngineResponse | None = None
        self._relay: StreamRelay | None = None
        # Set once a stream's headers went out.
        self._sender: StreamSender | None = None
        self._ended_by: Exception | None = None
        self._cancel: anyio.CancelScope | None = None
        self._group: TaskGroup | None = None

    async def __aenter__(self) -> "Flight":
        self._services.drain.enter()
        self.trace.enter()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        try:
            if error is not None:
                await self._end(error)
        finally:
            if self._upstream is not None:
                self._upstream.close()
            self._count_partial_output()
            # Nothing above may leave the request without an outcome.
            self.record.finish(
                "failed",
                status=200 if self._sender is not None else 500,
                error="request torn down by the gateway",
            )
            self._conclude()
            self._release()
            self._services.drain.leave()
            self.trace.end(self.record)
        # Everything is answered here; cancellation goes on up.
        return error is None or isinstance(error, Exception)

    async def run(self, admission: AdmissionRequest, terms: Terms) -> None:
        """Admit the request and answer it from an engine, on ``terms``,
        watching the client and the drain the whole time."""
        self._admission, self._terms = admission, terms
        failure: Exception | None = None
        async with anyio.create_task_group() as group:
            self._cancel, self._group = group.cancel_scope, group
            group.start_soon(self._watch_client)
            unregister = self._services.drain.on_stop(self._stop_for_drain)
            try:
                await self._admit_reporting()
                await self._call()
            except Exception as exc:
                # Raised after the task group, so that it is not wrapped in
                # an exception group.
                failure = exc
            finally:
                unregister()
                group.cancel_scope.cancel()
        cause = self._ended_by or failure
        if cause is not None:
            raise cause

    @property
    def engine(self) -> str | None:
        """The engine it was sent to last."""
        return self._tried[-1] if self._tried else None

    # --- admitted, called, answered --------------------------------------------

    async def _admit_reporting(self) -> None:
        """Admit it; a stream that asked for its queue status is told where
        it stands while it waits (``app.request.queue_status``)."""
        assert self._admission is not None
        if not (self._admission.job.stream and asked(self._request.headers)):
            await self._admit()
            return
        request_id, services = self.record.engine_request_id, self._services
        assert self._group is not None
        async with reporting(
            self._group,
            lambda: services.admission.place(request_id),
            self._open_stream,
            services.settings.queue_status_interval,
            self._end_because,
        ):
            await self._admit()

    async def _admit(self) -> None:
        assert self._admission is not None
        services, record = self._services, self.record
        record.enter("queued")
        with self.trace.queue(retry=bool(self._tried)) as queued:
            self._hold = hold = await services.admission.admit(self._admission, record, self._tried)
            engine = hold.choice.engine
            reason = route_reason(hold.choice, retry=bool(self._tried))
            queued.admitted(engine, reason, services.router.name)
        self._tried.append(engine)
        record.admitted(engine_label(engine), len(self._tried))
        services.metrics.in_flight.inc()
        # A sheddable request may be stopped for a higher class.
        hold.lane.on_evict(self._end_because)

    async def _call(self) -> None:
        """Answer from the engine admitted to; on its failure, the retry rule."""
        while True:
            try:
                await self._answer()
                return
            except GatewayError as error:
                if not await self._move(error):
                    raise

    async def _answer(self) -> None:
        assert self._admission is not None
        assert self._hold is not None
        job, record = self._admission.job, self.record
        record.enter("waiting_first_token" if job.stream else "non_streaming")
        engine, path = self._hold.choice.engine, self._engine_path
        services = self._services
        # A stream's head comes once its engine has taken it in: the call is
        # under way until then (``app.request.transit``). A whole answer's head comes
        # with its end, which says nothing of when it was taken in.
        under_way: AbstractContextManager[None] = (
            services.transit.calling() if job.stream else nullcontext()
        )
        with self.trace.engine_call(engine, path, len(self._tried)):
            with under_way:
                self._upstream = await services.engine_client.open(
                    engine,
                    path,
                    job.upstream_body,
                    record.engine_request_id,
                    stream=job.stream,
                    content_type=job.upstream_type,
                    extra_headers=job.engine_headers,
                )
            if job.stream:
                await self._relay_stream()
            else:
                await self._relay_whole(self._upstream)

    async def _relay_stream(self) -> None:
        assert self._admission is not None
        assert self._upstream is not None
        job, hold = self._admission.job, self._hold
        self._relay = relay = relay_for(
            job, self.record, self._services.metrics, charged=self._terms.charged
        )
        if hold is not None:
            # Admission samples the stream from here on.
            hold.lane.opened(relay)
        sender = await self._open_stream()
        await sender.pump(self._upstream.chunks(), relay)
        relay.finish()
        record = self.record
        first = record.first_token_at
        if hold is not None and record.outcome == "completed" and record.completion_tokens:
            seconds = 0.0 if first is None else time.perf_counter() - first
            hold.lane.ended(record.completion_tokens, relay.events, seconds)
        self._conclude()
        await sender.end()

    async def _open_stream(self) -> StreamSender:
        """The stream's sender, its head sent (once, whoever asks first: the
        relay, or the queue status before admission)."""
        if self._sender is None:
            settings, metrics = self._services.settings, self._services.metrics
            sender = StreamSender(
                self._send,
                ping_seconds=settings.sse_ping_seconds,
                send_timeout=settings.sse_send_timeout,
                first_event_added=metrics.first_event_added,
            )
            with anyio.CancelScope(shield=True):
                await sender.start(self._head_headers())
            self._sender = sender
            assert self._group is not None
            self._group.start_soon(sender.keep_time, self._end_because)
        return self._sender

    async def _relay_whole(self, upstream: EngineResponse) -> None:
        """A non-streaming answer: nothing reaches the client until it is whole."""
        content = await upstream.read()
        take_answer(content, self._route.usage, self.record)
        self.record.finish("completed", status=upstream.status)
        self._conclude()
        response = Response(
            content,
            status_code=upstream.status,
            media_type=upstream.content_type,
            headers=self._head_headers(),
        )
        await response(self._request.scope, self._request.receive, self._send)

    async def _move(self, error: GatewayError) -> bool:
        """The retry rule: True if the request, failed by its engine before
        any byte of the answer reached the client, was admitted elsewhere."""
        assert self._admission is not None
        assert self._hold is not None
        sent = self._sender is not None and self._sender.sent_events
        if sent or not error.retryable or len(self._tried) >= 2:
            return False
        failed, engines = self._hold.choice.engine, self._services.engines
        if error.ejects:
            engines.mark_down(failed)
        elsewhere = RouteRequest(
            self._admission.job.model,
            excluded=frozenset(self._tried),
            pinned=self._admission.pinned,
        )
        if not eligible(elsewhere, engines.candidates()):
            return False
        if self._upstream is not None:
            self._upstream.close()
            self._upstream = None
        self._release()
        self._services.metrics.engine_retries.labels(engine_label(failed)).inc()
        await self._admit()
        return True

    def _release(self) -> None:
        """Give the engine's capacity back (once per admission)."""
        if self._hold is not None:
            self._services.metrics.in_flight.dec()
            self._hold.release(self.record)
            self._hold = None

    # --- what else ends it ----------------------------------------------------

    def _end_because(self, cause: Exception) -> None:
        if self._ended_by is None and self._cancel is not None:
            self._ended_by = cause
            self._cancel.cancel()

    def _stop_for_drain(self) -> None:
        self._end_because(StoppedByShutdown("the gateway is shutting down; retry the request"))

    async def _watch_client(self) -> None:
        receive = self._request.receive
        while (await receive())["type"] != "http.disconnect":
            pass
        self._end_because(ClientDisconnected())

    async def _end(self, error: BaseException) -> None:
        """Record the outcome of a request that did not end with its answer,
        and answer its error where there is a client to answer."""
        record = self.record
        self._count_partial_output()
        if isinstance(error, ClientDisconnected):
            record.cancel()
            return
        if isinstance(error, SlowReader):
            # The response stays unfinished: its connection is closed by the
            # server, which this request's one log line already explains.
            left_unfinished.set(True)
            log.warning("dropped a client that stopped reading: %s", error.message)
            record.fail(error)
            return
        if not isinstance(error, Exception):
            return  # cancelled from outside: the ``finally`` records it
        if not isinstance(error, GatewayError):
            # A bug: the request still ends in one outcome, answered and logged once.
            log.error("unexpected error while serving a request", exc_info=error)
            error = InternalError("internal gateway error")
        record.fail(error)
        # Counted before the client can see the error.
        self._conclude()
        if error.status == 503 and error.retry_after is None:
            # Every 503 says when to come back: the engine unreachable after
            # admission, the drain's deadline (neither knows a better time).
            error.retry_after = self._services.settings.retry_after_unavailable
        self.trace.answered_error(error)
        if self._sender is not None:
            named = self._route.stream != "chunks"
            event = error_event(error, self._route.errors, named=named)
            await self._sender.end(event, within=_FAREWELL_SECONDS)
            return
        response = error_response(error, self._route.errors)
        response.headers.update(self._headers)
        await response(self._request.scope, self._request.receive, self._send)

    def _head_headers(self) -> dict[str, str]:
        """An answer's head: its id, its route's terms, its timing."""
        headers = self._headers | dict(self._terms.headers)
        settings = self._services.settings
        if settings.server_timing:
            headers |= self.record.timing_headers(settings.timing_allow_origin)
        return headers

    def _conclude(self) -> None:
        """Once the request has its outcome: what follows from it, then the
        outcome counted and logged. Called as soon as the outcome is known
        (before the client sees the end of its answer, so what it reads next
        already counts it), and from ``__aexit__`` whatever happened."""
        record, at_end = self.record, self._terms.at_end
        if self._concluded or not record.finished:
            return
        self._concluded = True
        for listener in (at_end.settle_key, at_end.learn_estimate, at_end.remember_response):
            if listener is None:
                continue
            try:
                listener(record)
            except Exception:
                log.exception("ending request %s: %s failed", record.request_id, listener)
        record.report()

    def _count_partial_output(self) -> None:
        if self._relay is not None:
            self._relay.count_partial_output()
