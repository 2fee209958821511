"""One completion request, end to end: validation → admission → engine → client.

Every request that reaches a route gets a ``RequestRecord`` here and leaves
with exactly one outcome. Errors of any stage are ``GatewayError``s, turned
into responses in one place (``app.errors.error_response``); a stream that
breaks after it started ends with ``app.errors.sse_error_event``.
"""

import json
import re
import time

import httpx
from starlette.requests import Request
from starlette.responses import Response

from app.admission.base import Ticket
from app.errors import (
    Draining,
    EngineStatusError,
    EngineUnavailable,
    GatewayError,
    InvalidRequest,
    StoppedByShutdown,
    UpstreamFailed,
    UpstreamTimeout,
    UpstreamUnreachable,
    error_response,
)
from app.record import RequestRecord
from app.relay.disconnect import ClientDisconnected, Stopped, until_disconnected
from app.relay.stream import RelayResponse, StreamRelay
from app.relay.upstream import close_quietly
from app.services import Services
from app.validation import CompletionJob, Route, check_request, read_json_body

ENGINE_PATHS: dict[Route, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
PRIORITIES = ("high", "normal", "low")
_TENANT = re.compile(r"[A-Za-z0-9._:@\-]{1,64}")


def open_record(request: Request, route: Route, services: Services) -> RequestRecord:
    return RequestRecord(
        request_id=request.state.request_id,
        route=route,
        tenant=request.headers.get("x-tenant-id") or "anonymous",
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
    if not _TENANT.fullmatch(record.tenant):
        raise InvalidRequest("X-Tenant-Id: 1 to 64 letters, digits or ._:@-", param="X-Tenant-Id")
    if record.priority not in PRIORITIES:
        raise InvalidRequest("X-Priority: one of high, normal, low", param="X-Priority")
    body = await read_json_body(request, settings.max_body_bytes)
    if not services.monitor.up:
        raise EngineUnavailable(
            "the engine is not available", retry_after=settings.retry_after_unavailable
        )
    model = body.get("model")
    models = await services.monitor.models_for(model if isinstance(model, str) else "")
    job = check_request(route, body, models, settings.max_n)
    record.stream = job.stream
    return job


async def _open_stream(
    request: Request, job: CompletionJob, record: RequestRecord, services: Services, ticket: Ticket
) -> Response:
    record.phase = "waiting_first_token"
    upstream = await until_disconnected(
        request.receive,
        lambda: services.engine.open(
            ENGINE_PATHS[job.route], job.upstream_body(), record.request_id, stream=True
        ),
        discard=close_quietly,
    )

    def on_close(closed: RequestRecord) -> None:
        _release(services, ticket, closed)
        services.drain.leave()

    relay = StreamRelay(
        upstream,
        record,
        services.metrics,
        services.drain,
        forward_usage=job.wants_usage,
        on_close=on_close,
    )
    return RelayResponse(relay, services.settings)


async def _call(job: CompletionJob, record: RequestRecord, services: Services) -> Response:
    upstream = await services.engine.open(
        ENGINE_PATHS[job.route], job.upstream_body(), record.request_id, stream=False
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
