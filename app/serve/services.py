"""The objects one app instance works with, built in its lifespan.

They live in the lifespan state (``request.state.services``), not in module
globals, so every app (and every test) has its own.
"""

from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from app.admission.base import Admission, Unlimited
from app.admission.controller import AdmissionController
from app.admission.estimate import PromptTokenEstimator
from app.engine.client import EngineClient
from app.engine.pool import EnginePool
from app.keys.quota import KeyQuota
from app.keys.watch import KeysWatcher
from app.observe.loop_lag import LoopLag
from app.observe.metrics import GatewayMetrics
from app.request.receiving import Receiving
from app.request.record import Telemetry
from app.request.response_ids import ResponseHolders, Responses
from app.request.transit import Transit
from app.routing.router import Router
from app.routing.setup import build_router
from app.serve.drain import Drain
from app.settings import Settings
from app.state.address import redis_address
from app.state.base import LimitStore
from app.state.fleet import FleetState
from app.state.local import LocalLimits
from app.state.redis import SharedRedis
from app.state.redis_limits import SharedLimits
from app.tokens.counter import PromptCounter


@dataclass
class Services:
    settings: Settings
    metrics: GatewayMetrics
    telemetry: Telemetry
    # The HTTP client for the engines, and the engines it calls.
    engine_client: EngineClient
    engines: EnginePool
    drain: Drain
    admission: Admission
    # Where admission sends a request (its filters, scorers and pick).
    router: Router
    receiving: Receiving
    # Engine calls under way (a request behind a queue lets them go first).
    transit: Transit
    estimator: PromptTokenEstimator
    # How prompts are counted (the engine's /tokenize, tokenizer files, or
    # the estimator).
    counter: PromptCounter
    # Which engine holds which response of the Responses API.
    responses: Responses
    # Both None when no keys file is configured.
    keys: KeysWatcher | None
    quota: KeyQuota | None
    # State shared with other replicas (None: this process alone).
    shared: SharedRedis | None
    # What runs beside the requests for the app's life.
    background: list[Callable[[], Coroutine[Any, Any, None]]] = field(default_factory=list)


def build_services(settings: Settings, drain: Drain) -> Services:
    metrics = GatewayMetrics()
    engine = EngineClient(settings)
    engines = EnginePool(settings, engine, metrics)
    estimator = PromptTokenEstimator()
    router = build_router(settings, engines.kv_indexes)
    shared = fleet = None
    address = redis_address(settings)
    if address is not None:
        shared = SharedRedis(address, settings.redis_lease_seconds, settings.redis_timeout)
        fleet = FleetState(shared)
        shared_up = metrics.track_shared_state()
        shared_up.set(0)
        shared.on_change(lambda up: shared_up.set(1 if up else 0))
    background: list[Callable[[], Coroutine[Any, Any, None]]] = [engines.run]
    admission: Admission
    if settings.admission == "on":
        controller = AdmissionController(settings, metrics, estimator, router, fleet)
        if shared is not None and controller.shared is not None:
            shared.on_heartbeat(controller.shared.beat)
            background.append(controller.run)
        admission = controller
    else:
        admission = Unlimited(router)
    engines.on_engine(admission.add_engine)
    engines.on_change(admission.on_engine_change)
    engines.on_stats(admission.on_engine_stats)
    engines.on_forget(admission.forget_engine)

    def keep_served_models(_: str) -> None:
        # A model or adapter no engine lists any more takes its series along.
        metrics.models.keep_only({name for m in engines.monitors.values() for name in m.models})

    engines.on_change(keep_served_models)
    engines.on_forget(keep_served_models)
    drain.on_begin(admission.start_draining)
    drain.on_begin(lambda: metrics.draining.set(1))
    keys = quota = None
    if settings.keys_file is not None:
        keys = KeysWatcher(
            settings.keys_file, settings.keys_reload_interval, metrics.keys_reload_failures.inc
        )
        store: LimitStore = LocalLimits() if shared is None else SharedLimits(shared)
        quota = KeyQuota(store, settings.rate_limit_window)
    if shared is not None:
        background.append(shared.run)
    background.append(LoopLag(metrics.event_loop_lag).run)
    return Services(
        settings=settings,
        metrics=metrics,
        telemetry=Telemetry(metrics),
        engine_client=engine,
        engines=engines,
        drain=drain,
        admission=admission,
        router=router,
        receiving=Receiving(
            settings.max_receiving, metrics.receiving, settings.retry_after_unavailable
        ),
        transit=Transit(),
        estimator=estimator,
        counter=PromptCounter(settings, engines, engine, metrics.prompts_counted),
        responses=Responses(
            ResponseHolders(settings.responses_remembered, settings.responses_remember_seconds),
            engines,
            engine,
            settings.retry_after_unavailable,
        ),
        keys=keys,
        quota=quota,
        shared=shared,
        background=background,
    )
