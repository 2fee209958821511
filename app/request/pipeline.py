"""One API request, top to bottom: identify → receive, validate and count
→ charge → admit → call. The same for every admitted route: chat and
completions, the Responses API, embeddings.

The steps run inside the request's ``Flight`` (``app.request.flight``), which owns
the request from its arrival to its end: whatever a step raises, and however
the request ends, the flight records its one outcome, answers its error and
gives back what it held. Errors of any stage are ``GatewayError``s.
"""

from dataclasses import replace
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.types import Send

from app.admission.base import AdmissionRequest
from app.admission.demand import Demand, demand_of
from app.keys.file import KeyEntry
from app.keys.identify import IDENTIFIED, cache_scope, identify
from app.keys.quota import Charge, KeyQuota, tokens_used
from app.request.errors import Draining, EngineUnavailable, Forbidden
from app.request.flight import Flight
from app.request.identity import Identity
from app.request.owned_fields import CacheScope
from app.request.record import RequestRecord
from app.request.response_ids import Holder
from app.request.routes import ROUTES
from app.request.terms import AtEnd, EndListener, Terms
from app.request.transit import TRANSIT_WAIT_SECONDS
from app.request.validation import CompletionJob, Limits, Route, check_request, read_body
from app.routing.prefix_key import prompt_keys
from app.serve.services import Services
from app.settings import Settings


async def serve_completion(request: Request, route: Route, services: Services, send: Send) -> None:
    """Serve one API request to its end, sending its answer with ``send``."""
    async with Flight(request, route, services, send) as flight:
        record = flight.record
        if services.drain.draining:
            raise Draining(
                "the gateway is shutting down; retry on another instance",
                retry_after=services.settings.retry_after_unavailable,
            )
        identity, key = _identify(request, record, services)
        scope = cache_scope(key, services.settings.prefix_cache_isolation)
        # A stream whose tokens count against the key's limit asks the engine
        # for its usage in every chunk, to pay exactly what it generated.
        charged = bool(key and services.quota and key.tokens_per_minute is not None)
        priority = _engine_priority(services, identity)
        job = await _receive(request, route, record, services, scope, charged, key, priority)
        pinned = None
        if job.previous_response_id is not None:
            held = await services.responses.locate(
                job.previous_response_id, identity.tenant, job.model
            )
            job, pinned = replace(job, history_tokens=held.tokens), held.engine
        demand = demand_of(job, services.estimator)
        # The prompt's keys, made once: routing, prefix-aware demand, retries.
        keys = prompt_keys(job, partial(services.estimator.estimate, job.route))
        at_end = AtEnd(
            learn_estimate=_learning(job, services),
            remember_response=_remembering(flight, job.response_id, identity, services),
        )
        headers: dict[str, str] = {}
        if key is not None and services.quota is not None:
            charge = await _charge(services.quota, key, record, demand)
            headers = charge.headers
            at_end = replace(at_end, settle_key=_settling(charge, demand))
        await flight.run(
            AdmissionRequest(job, demand, identity, keys=keys, pinned=pinned),
            Terms(charged=charged, headers=headers, at_end=at_end),
        )


def _identify(
    request: Request, record: RequestRecord, services: Services
) -> tuple[Identity, KeyEntry | None]:
    preset = request.scope.get(IDENTIFIED)
    try:
        if preset is not None:  # a batch's line, run in process as its batch's owner
            identity, key = preset
        else:
            identity, key = identify(request.headers, services.keys.ring if services.keys else None)
    except Forbidden as refused:
        record.refused_key(refused.tenant, refused.key_id)
        raise
    record.identify(identity)
    return identity, key


async def _receive(
    request: Request,
    route: Route,
    record: RequestRecord,
    services: Services,
    cache_scope: CacheScope | None,
    exact_usage: bool,
    key: KeyEntry | None,
    engine_priority: int | None,
) -> CompletionJob:
    """The request's body, read and checked (bounded: see ``Receiving``),
    salted for ``cache_scope``, its prompts counted. A model the key may not
    call is, to it, one that does not exist."""
    settings = services.settings
    if services.admission.queued:
        # Behind a queue, an early intake gains it nothing: the engine calls
        # under way go out first (``app.request.transit``). Before the receiving
        # bound: it has not started to read its body.
        await services.transit.answered(TRANSIT_WAIT_SECONDS)
    with services.receiving.enter():
        form = ROUTES[route].body == "form"
        limit = settings.max_upload_bytes if form else settings.max_body_bytes
        body = await read_body(request, route, limit, settings.body_timeout)
        record.enter("queued")
        _refuse_if_no_engine(body, services)
        body, models = await _model_table(body, key, services)
        limits = Limits(max_n=settings.max_n, max_batch=settings.max_batch)
        version = request.scope.get("http_version", "1.1")
        job = check_request(
            route,
            body,
            models,
            limits,
            version,
            cache_scope,
            exact_usage=exact_usage,
            request_id=record.engine_request_id,
            engine_priority=engine_priority,
        )
        if _count_decides(settings, exact_usage, services.router.reads_prompts):
            job = await services.counter.count(job, body, record.engine_request_id)
    record.checked(job.model, job.stream)
    return job


def _refuse_if_no_engine(body: dict[str, Any], services: Services) -> None:
    """No engine to send to: refused at once, unless the model is a cold one
    that is held while an engine comes up (``app.admission.cold``)."""
    model = body.get("model")
    cold = isinstance(model, str) and services.engines.catalog.is_cold(model)
    if cold and services.settings.cold_start_timeout > 0:
        return
    if cold or not services.engines.up:
        raise EngineUnavailable(
            "no engine is available", retry_after=services.settings.retry_after_unavailable
        )


def _engine_priority(services: Services, identity: Identity) -> int | None:
    """The scheduling priority the request runs at in the engine: its
    class's, where the engines order by priority (None: they do not)."""
    if services.settings.engine_scheduling != "priority":
        return None
    return services.classes[identity.priority].engine_priority


async def _model_table(
    body: dict[str, Any], key: KeyEntry | None, services: Services
) -> tuple[dict[str, Any], dict[str, int | None]]:
    """The body to send (an alias replaced by the served name it goes to)
    and the models it is checked against. What the key may not call does
    not exist to it, nor does an alias it may not call lead anywhere."""
    model = body.get("model")
    asked = model if isinstance(model, str) else ""
    served, models = await services.engines.catalog.lookup(asked)
    if key is not None and key.models is not None:
        allowed = key.may_call(asked)
        served = served if allowed else asked
        models = {
            name: length
            for name, length in models.items()
            if key.may_call(name) or (allowed and name == served)
        }
    if served != asked:
        # An alias: the engine knows the served name only.
        body = {**body, "model": served}
    return body, models


def _count_decides(settings: Settings, charged: bool, routed_by_prompt: bool) -> bool:
    """Whether a prompt's exact tokens decide anything: its reservation
    (admission on), its key's charge, the engine a route that weighs the
    prompt prefers (what the engines hold is looked up by token ids). With
    none of them, counting would be work for nothing."""
    return settings.admission == "on" or charged or routed_by_prompt


async def _charge(quota: KeyQuota, key: KeyEntry, record: RequestRecord, demand: Demand) -> Charge:
    """Charge the request against its key's limits (between its estimate
    and its worst case: ``app.keys.quota``); it settles to what it used when
    it ends (``_settling``)."""
    worst = demand.worst_usage
    charge = await quota.charge(key, record.engine_request_id, worst, demand.prompt_tokens)
    record.charged(worst if charge.charged is None else charge.charged, worst)
    return charge


def _settling(charge: Charge, demand: Demand) -> EndListener:
    """Settle the key's charge to what the request used; a completed one
    teaches the key's estimate."""

    def settle_key(ended: RequestRecord) -> None:
        ended.settled(tokens_used(ended, demand.prompt_tokens))
        completed = ended.outcome == "completed" and ended.completion_tokens is not None
        charge.settle(ended.used_tokens, ended.completion_tokens if completed else None)

    return settle_key


def _remembering(
    flight: Flight, response_id: str | None, identity: Identity, services: Services
) -> EndListener | None:
    """Remember which engine holds a completed response, and whose it is."""
    if response_id is None:
        return None

    def remember_response(ended: RequestRecord) -> None:
        engine = flight.engine
        if ended.outcome == "completed" and engine is not None:
            tokens = (ended.prompt_tokens or 0) + (ended.completion_tokens or 0)
            services.responses.held.remember(response_id, Holder(engine, identity.tenant, tokens))

    return remember_response


def _learning(job: CompletionJob, services: Services) -> EndListener | None:
    """Fit the prompt-token estimate to what the engine counts for one text prompt."""
    (prompt, *batch) = job.prompts
    # An audio window's usage counts its audio too: nothing the text says.
    if batch or not prompt.text or job.history_tokens or prompt.encoder:
        return None

    def learn_estimate(ended: RequestRecord) -> None:
        if ended.outcome == "completed" and ended.prompt_tokens:
            services.estimator.observe(job.route, len(prompt.text), ended.prompt_tokens)

    return learn_estimate
