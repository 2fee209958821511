"""The objects one app instance works with, built in its lifespan.

They live in the lifespan state (``request.state.services``), not in module
globals, so every app (and every test) has its own.
"""

from dataclasses import dataclass

import httpx

from app.admission.base import Admission, Unlimited
from app.admission.controller import AdmissionController
from app.drain import Drain
from app.engine.monitor import EngineMonitor
from app.metrics import GatewayMetrics
from app.receiving import Receiving
from app.record import Telemetry
from app.relay.upstream import EngineClient
from app.settings import Settings


@dataclass
class Services:
    settings: Settings
    metrics: GatewayMetrics
    telemetry: Telemetry
    engine: EngineClient
    monitor: EngineMonitor
    drain: Drain
    admission: Admission
    receiving: Receiving


def build_services(
    settings: Settings, drain: Drain, transport: httpx.AsyncBaseTransport | None = None
) -> Services:
    metrics = GatewayMetrics()
    engine = EngineClient(settings, transport)
    monitor = EngineMonitor(engine, settings, metrics)
    admission: Admission
    if settings.admission == "on":
        controller = AdmissionController(settings, metrics)
        monitor.on_stats(controller.on_engine_stats)
        admission = controller
    else:
        admission = Unlimited()
    drain.on_begin(admission.start_draining)
    drain.on_begin(lambda: metrics.draining.set(1))
    return Services(
        settings=settings,
        metrics=metrics,
        telemetry=Telemetry(metrics),
        engine=engine,
        monitor=monitor,
        drain=drain,
        admission=admission,
        receiving=Receiving(
            settings.max_receiving, metrics.receiving, settings.retry_after_unavailable
        ),
    )
