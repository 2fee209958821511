"""One completion request, end to end: validation → admission → engine → client.

Every request that reaches a route gets a ``RequestRecord`` here and leaves
with exactly one outcome, whatever happens — a client that leaves while its
body is still arriving, input that breaks a parser, a bug. Errors of any
stage are ``GatewayError``s, turned into responses in one place
(``app.responses.error_response``); a stream that breaks after it started
ends with ``app.errors.sse_error_event``.
"""

import json
import logging
import time

import httpx
from starlette.requests import Request
from starlette.responses import Response

from app.admission.base import Ticket
from app.errors import (
    ClientDisconnected,
    Draining,
    EngineStatusError,
    EngineUnavailable,
    GatewayError,
    InternalError,
    InvalidRequest,
    StoppedByShutdown,
    UpstreamFailed,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from app.identity import ANONYMOUS, TENANT_PATTERN, parse_priority
from app.record import RequestRecord
from app.relay.disconnect import Stopped, until_disconnected
from app.relay.response import RelayResponse
from app.relay.stream import StreamRelay
from app.relay.upstream import close_quietly
from app.responses import error_response
from app.services import Services
from app.validation import CompletionJob, Limits, Route, check_request, read_json_body

log = logging.getLogger("gateway")

ENGINE_PATHS: dict[Route, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


def open_record(request: Request, route: Route, services: Services) -> RequestRecord:
    return RequestRecord(
        request_id=request.state.request_id,
        route=route,
        tenant=request.headers.get("x-tenant-id") or ANONYMOUS,
        priority=(request.headers.get("x-priority") or "normal").lower(),
        telemetry=services.telemetry,
    )


async def serve_completion(request: Request, route: Route, services: Services) -> Response:
    record = open_record(request, route, services)
    drain = services.drain
    drain.enter()
    handed_to_stream = False
    try:
        job = await _accept(request, route, record, services)

        async def give_back(ticket: Ticket) -> None:
            # Admitted just as the client left.
            ticket.release(record)

        ticket = await until_disconnected(
            request.receive, lambda: services.admission.admit(job, record), discard=give_back
        )
        # From here the request holds engine capacity: ``_release`` gives it
        # back exactly once, here or when the stream closes.
        services.metrics.in_flight.inc()
        record.admitted_at = time.perf_counter()
        try:
            if job.stream:
                response = await _open_stream(request, job, record, services, ticket)
                handed_to_stream = True
                return response
            record.phase = "non_streaming"
            try:
                return await until_disconnected(
                    request.receive,
                    lambda: _call(job, record, services),
                    stop=services.drain.wait_stopping,
                )
            except Stopped:
                raise StoppedByShutdown("the gateway is shutting down; retry the request") from None
        finally:
            if not handed_to_stream:
                _release(services, ticket, record)
    except GatewayError as error:
        if isinstance(error, UpstreamUnreachable):
            services.monitor.mark_down()
        if isinstance(error, EngineStatusError) and error.status == 503:
            error.retry_after = error.retry_after or services.settings.retry_after_unavailable
        record.fail(error)
        return error_response(error)
    except ClientDisconnected:
        record.cancel()
        return Response(status_code=499)
    except Exception:
        # A bug: the request still ends in one outcome, answered and logged once.
        log.exception("unexpected error while serving a request")
        internal = InternalError("internal gateway error")
        record.fail(internal)
        return error_response(internal)
    finally:
        if not handed_to_stream:
            drain.leave()


async def _accept(
    request: Request, route: Route, record: RequestRecord, services: Services
) -> CompletionJob:
    """Everything that may refuse a request before admission."""
    settings = services.settings
    if services.drain.draining:
        raise Draining(
            "the gateway is shutting down; retry on another instance",
            retry_after=settings.retry_after_unavailable,
        )
    if not TENANT_PATTERN.fullmatch(record.tenant):
        raise InvalidRequest("X-Tenant-Id: 1 to 64 letters, digits or ._:@-", param="X-Tenant-Id")
    if parse_priority(record.priority) is None:
        raise InvalidRequest("X-Priority: one of high, normal, low", param="X-Priority")
    with services.receiving.enter():
        body = await read_json_body(request, settings.max_body_bytes, settings.body_timeout)
        record.phase = "queued"
        if not services.monitor.up:
            raise EngineUnavailable(
                "the engine is not available", retry_after=settings.retry_after_unavailable
            )
        model = body.get("model")
        models = await services.monitor.models_for(model if isinstance(model, str) else "")
        limits = Limits(max_n=settings.max_n, max_batch=settings.max_batch)
        version = request.scope.get("http_version", "1.1")
        job = check_request(route, body, models, limits, version)
    record.stream = job.stream
    return job


async def _open_stream(
    request: Request, job: CompletionJob, record: RequestRecord, services: Services, ticket: Ticket
) -> Response:
    record.phase = "waiting_first_token"
    upstream = await until_disconnected(
        request.receive,
        lambda: services.engine.open(
            ENGINE_PATHS[job.route], job.upstream_body, record.engine_request_id, stream=True
        ),
        discard=close_quietly,
    )

    def on_close() -> None:
        _release(services, ticket, record)
        services.drain.leave()

    settings = services.settings
    relay = StreamRelay(record, services.metrics, forward_usage=job.wants_usage)
    return RelayResponse(
        upstream,
        relay,
        record,
        services.drain,
        ping_seconds=settings.sse_ping_seconds,
        send_timeout=settings.sse_send_timeout,
        on_close=on_close,
    )


async def _call(job: CompletionJob, record: RequestRecord, services: Services) -> Response:
    upstream = await services.engine.open(
        ENGINE_PATHS[job.route], job.upstream_body, record.engine_request_id, stream=False
    )
    try:
        content = await upstream.aread()
    except httpx.TimeoutException as exc:
        raise UpstreamTimeout("the engine did not finish in time") from exc
    except httpx.HTTPError as exc:
        raise UpstreamFailed(f"the engine connection broke: {exc!r}") from exc
    finally:
        await close_quietly(upstream)
    _read_usage(content, record)
    record.finish("completed", status=upstream.status_code)
    return Response(content, status_code=upstream.status_code, media_type="application/json")


def _read_usage(content: bytes, record: RequestRecord) -> None:
    try:
        usage = json.loads(content).get("usage")
    except (ValueError, AttributeError):
        return
    if isinstance(usage, dict):
        record.prompt_tokens = usage.get("prompt_tokens")
        record.completion_tokens = usage.get("completion_tokens")


def _release(services: Services, ticket: Ticket, record: RequestRecord) -> None:
    services.metrics.in_flight.dec()
    ticket.release(record)
