"""What the gateway knows about the engine, kept fresh by one background loop.

Every ``health_interval`` seconds: the engine's ``/health`` (drives
``gateway_upstream_up`` and readiness), its model list when unknown or after
the engine comes back, and its ``/metrics``, parsed once and handed to
listeners (admission reads KV capacity and preemptions from it).

Two ways this could lie, and what prevents them: a loop that died on an
unexpected error would leave the last answer standing forever, so the loop
survives any error and a health answer older than a few intervals counts as
down; and an engine whose metrics lack the series admission reads is not
taken for an idle one — ``gateway_engine_stats_missing`` counts the missing
series, a log line names them, and admission falls back (see the policy).
"""

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import httpx

from app.engine.stats import EngineStats, parse_engine_stats
from app.metrics import GatewayMetrics
from app.relay.upstream import Upstream
from app.settings import Settings

log = logging.getLogger("gateway.engine")

StatsListener = Callable[[EngineStats], None]
# A health answer is trusted for this many check intervals.
_STALE_AFTER_CHECKS = 3


class EngineMonitor:
    def __init__(self, upstream: Upstream, settings: Settings, metrics: GatewayMetrics) -> None:
        self._upstream = upstream
        self._interval = settings.health_interval
        self._timeout = settings.health_timeout
        self._metrics = metrics
        self._listeners: list[StatsListener] = []
        self._up = False
        self._checked_at = -float("inf")
        self._missing: tuple[str, ...] = ()
        self.models: dict[str, int | None] = {}
        self._models_at = 0.0
        metrics.upstream_up.set(0)

    @property
    def up(self) -> bool:
        fresh = time.monotonic() - self._checked_at
        return self._up and fresh < _STALE_AFTER_CHECKS * self._interval + self._timeout

    def on_stats(self, listener: StatsListener) -> None:
        self._listeners.append(listener)

    async def run(self) -> None:
        while True:
            try:
                await self.check()
            except Exception:
                log.exception("engine check failed; the engine counts as down until one passes")
                self._set_up(False)
            await asyncio.sleep(self._interval)

    async def check(self) -> None:
        was_up = self._up
        try:
            response = await self._upstream.get("/health", timeout=self._timeout)
            up = response.status_code == 200
        except httpx.HTTPError:
            up = False
        if up and (not was_up or not self.models):
            up = await self.refresh_models()
        if up and self._listeners:
            await self._read_stats()
        self._set_up(up)

    def mark_down(self) -> None:
        """Called when a request could not reach the engine: readiness turns
        503 now rather than at the next check."""
        self._set_up(False)

    def _set_up(self, up: bool) -> None:
        if up != self._up:
            log.warning("engine is %s", "up" if up else "DOWN")
        self._up = up
        self._checked_at = time.monotonic()
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

    async def _read_stats(self) -> None:
        try:
            response = await self._upstream.get("/metrics", timeout=self._timeout)
        except httpx.HTTPError:
            return
        if response.status_code != 200:
            return
        stats = parse_engine_stats(response.text)
        if stats.missing != self._missing:
            if stats.missing:
                log.error(
                    "the engine's /metrics lacks %s: admission falls back to its conservative"
                    " limits until they are back",
                    ", ".join(stats.missing),
                )
            else:
                log.warning("the engine's /metrics has every series admission reads again")
            self._missing = stats.missing
        self._metrics.engine_stats_missing.set(len(stats.missing))
        for listener in self._listeners:
            try:
                listener(stats)
            except Exception:
                log.exception("engine stats listener failed")
