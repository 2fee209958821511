"""What the gateway knows about the engine, kept fresh by one background loop.

Every ``health_interval`` seconds: the engine's ``/health`` (drives
``gateway_upstream_up`` and readiness), its model list when unknown or after
the engine comes back, and its ``/metrics`` text handed to listeners (the
admission controller reads KV capacity and preemptions from it).
"""

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx

from app.metrics import GatewayMetrics
from app.relay.upstream import Upstream
from app.settings import Settings

log = logging.getLogger("gateway.engine")

MetricsListener = Callable[[str], None]


class EngineMonitor:
    def __init__(self, upstream: Upstream, settings: Settings, metrics: GatewayMetrics) -> None:
        self._upstream = upstream
        self._interval = settings.health_interval
        self._timeout = settings.health_timeout
        self._metrics = metrics
        self._listeners: list[MetricsListener] = []
        self.up = False
        self.models: dict[str, int | None] = {}
        self._models_at = 0.0
        metrics.upstream_up.set(0)

    def on_metrics(self, listener: MetricsListener) -> None:
        self._listeners.append(listener)

    async def run(self) -> None:
        while True:
            await self.check()
            await asyncio.sleep(self._interval)

    async def check(self) -> None:
        was_up = self.up
        try:
            response = await self._upstream.get("/health", timeout=self._timeout)
            up = response.status_code == 200
        except httpx.HTTPError:
            up = False
        if up and (not was_up or not self.models):
            up = await self.refresh_models()
        if up and self._listeners:
            await self._read_metrics()
        self._set_up(up)

    def mark_down(self) -> None:
        """Called when a request could not reach the engine: readiness turns
        503 now rather than at the next check."""
        self._set_up(False)

    def _set_up(self, up: bool) -> None:
        if up != self.up:
            log.warning("engine is %s", "up" if up else "DOWN")
        self.up = up
        self._metrics.upstream_up.set(1 if up else 0)

    async def refresh_models(self) -> bool:
        try:
            response = await self._upstream.get("/v1/models", timeout=self._timeout)
            data: Any = response.json()
        except (httpx.HTTPError, ValueError):
            return False
        if response.status_code != 200 or not isinstance(data, dict):
            return False
        models: dict[str, int | None] = {}
        for entry in data.get("data") or ():
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                length = entry.get("max_model_len")
                models[entry["id"]] = length if isinstance(length, int) else None
        self.models = models
        self._models_at = time.monotonic()
        return bool(models)

    async def models_for(self, name: str) -> dict[str, int | None]:
        """The model table, refreshed first if ``name`` is unknown and the
        table is more than a few seconds old (a model may have been added)."""
        if name not in self.models and time.monotonic() - self._models_at > 5.0:
            await self.refresh_models()
        return self.models

    async def _read_metrics(self) -> None:
        try:
            response = await self._upstream.get("/metrics", timeout=self._timeout)
        except httpx.HTTPError:
            return
        if response.status_code != 200:
            return
        text = response.text
        for listener in self._listeners:
            try:
                listener(text)
            except Exception:
                log.exception("engine metrics listener failed")
