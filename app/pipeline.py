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

from app.admission.base import AdmissionRequest
from app.admission.demand import Demand, demand_of
from app.errors import (
    ClientDisconnected,
    Draining,
    EngineUnavailable,
    Forbidden,
    GatewayError,
    InternalError,
    StoppedByShutdown,
    UpstreamFailed,
    UpstreamTimeout,
)
from app.keys.file import KeyEntry
from app.keys.identify import identify
from app.keys.quota import KeyQuota, tokens_used
from app.placement import Placement, never, retryable
from app.record import RequestRecord
from app.relay.disconnect import Stopped, until_disconnected
from app.relay.response import RelayResponse
from app.relay.stream import StreamRelay
from app.relay.upstream import close_quietly
from app.responses import error_response
from app.routing.prefix_key import affinity_of
from app.services import Services
from app.validation import CompletionJob, Limits, Route, check_request, read_json_body

log = logging.getLogger("gateway")

ENGINE_PATHS: dict[Route, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


async def serve_completion(request: Request, route: Route, services: Services) -> Response:
    record = RequestRecord(request.state.request_id, route, services.telemetry)
    drain = services.drain
    drain.enter()
    handed_to_stream = False
    try:
        if drain.draining:
            raise Draining(
                "the gateway is shutting down; retry on another instance",
                retry_after=services.settings.retry_after_unavailable,
            )
        try:
            identity, key = identify(request.headers, services.keys.ring if services.keys else None)
        except Forbidden as refused:
            record.tenant, record.key_id = refused.tenant, refused.key_id
            raise
        record.identify(identity)
        job = await _receive(request, route, record, services)
        demand = demand_of(job, services.estimator)
        _learn_from(record, job, services)
        headers: dict[str, str] = {}
        if key is not None and services.quota is not None:
            headers = await _charge(services.quota, key, record, demand)

        placement = Placement(
            services,
            AdmissionRequest(job, demand, identity, affinity_of(job)),
            record,
            request.receive,
        )
        await placement.admit()
        # From here the request holds engine capacity: the placement gives
        # it back exactly once, here or when the stream closes.
        record.admitted_at = time.perf_counter()
        try:
            if job.stream:
                response: Response = await _open_stream(request, job, record, services, placement)
                handed_to_stream = True
            else:
                response = await _answer(request, job, record, services, placement)
            response.headers.update(headers)
            return response
        finally:
            if not handed_to_stream:
                placement.release()
    except GatewayError as error:
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


async def _receive(
    request: Request, route: Route, record: RequestRecord, services: Services
) -> CompletionJob:
    """The request's body, read and checked (bounded: see ``Receiving``)."""
    settings = services.settings
    with services.receiving.enter():
        body = await read_json_body(request, settings.max_body_bytes, settings.body_timeout)
        record.phase = "queued"
        if not services.engines.up:
            raise EngineUnavailable(
                "no engine is available", retry_after=settings.retry_after_unavailable
            )
        model = body.get("model")
        models = await services.engines.models_for(model if isinstance(model, str) else "")
        limits = Limits(max_n=settings.max_n, max_batch=settings.max_batch)
        version = request.scope.get("http_version", "1.1")
        job = check_request(route, body, models, limits, version)
    record.stream = job.stream
    return job


async def _charge(
    quota: KeyQuota, key: KeyEntry, record: RequestRecord, demand: Demand
) -> dict[str, str]:
    """Hold the request's worst case against its key's limits; it settles to
    what it used when it ends. Returns the rate-limit headers to answer with."""
    charge = await quota.charge(key, record.engine_request_id, demand.worst_usage)
    record.charged_tokens, record.charged_wall = demand.worst_usage, time.time()

    def settle(ended: RequestRecord) -> None:
        ended.used_tokens = tokens_used(ended, demand.prompt_tokens)
        charge.settle(ended.used_tokens)

    record.on_end(settle)
    return charge.headers


def _learn_from(record: RequestRecord, job: CompletionJob, services: Services) -> None:
    """Fit the prompt-token estimate to what the engine counts for one text prompt."""
    (prompt, *batch) = job.prompts
    if batch or not prompt.text:
        return

    def learn(ended: RequestRecord) -> None:
        if ended.outcome == "completed" and ended.prompt_tokens:
            services.estimator.observe(job.route, len(prompt.text), ended.prompt_tokens)

    record.on_end(learn)


async def _open_stream(
    request: Request,
    job: CompletionJob,
    record: RequestRecord,
    services: Services,
    placement: Placement,
) -> Response:
    path = ENGINE_PATHS[job.route]
    record.phase = "waiting_first_token"
    upstream = await placement.open(path, stream=True)
    # From here the response watches the client itself.
    placement.receive = never

    async def reopen(error: GatewayError) -> httpx.Response | None:
        """The engine failed before the first event: once, elsewhere."""
        if not (retryable(error) and await placement.move(error)):
            return None
        record.phase = "waiting_first_token"
        return await placement.open(path, stream=True)

    def on_close() -> None:
        placement.release()
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
        reopen=reopen,
    )


async def _answer(
    request: Request,
    job: CompletionJob,
    record: RequestRecord,
    services: Services,
    placement: Placement,
) -> Response:
    """A non-streaming call; nothing reaches the client until it is whole,
    so any retryable failure of the engine is retried once elsewhere."""
    while True:
        record.phase = "non_streaming"
        try:
            return await until_disconnected(
                request.receive,
                lambda: _call(job, record, services, placement.engine),
                stop=services.drain.wait_stopping,
            )
        except Stopped:
            raise StoppedByShutdown("the gateway is shutting down; retry the request") from None
        except GatewayError as error:
            if not (retryable(error) and await placement.move(error)):
                raise


async def _call(
    job: CompletionJob, record: RequestRecord, services: Services, engine: str
) -> Response:
    upstream = await services.engine.open(
        engine, ENGINE_PATHS[job.route], job.upstream_body, record.engine_request_id, stream=False
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
