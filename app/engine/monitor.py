"""What the gateway knows about one engine, kept fresh by one background loop.

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
from app.relay.upstream import EngineClient
from app.settings import Settings

log = logging.getLogger("gateway.engine")

StatsListener = Callable[[str, EngineStats], None]
StateListener = Callable[[str, bool, frozenset[str]], None]
# A health answer is trusted for this many check intervals.
_STALE_AFTER_CHECKS = 3


class EngineMonitor:
    def __init__(
        self,
        url: str,
        client: EngineClient,
        settings: Settings,
        metrics: GatewayMetrics,
        on_state: StateListener,
        on_stats: StatsListener,
    ) -> None:
        self.url = url
        self.label = engine_label(url)
        self._client = client
        self._interval = settings.health_interval
        self._timeout = settings.health_timeout
        self._on_state = on_state
        self._on_stats = on_stats
        self._up = False
        self._checked_at = -float("inf")
        self._missing: tuple[str, ...] = ()
        self.models: dict[str, int | None] = {}
        self._models_at = 0.0
        self._up_gauge = metrics.upstream_up.labels(self.label)
        self._missing_gauge = metrics.engine_stats_missing.labels(self.label)
        self._ejections = metrics.engine_ejections.labels(self.label)
        self._up_gauge.set(0)

    @property
    def up(self) -> bool:
        fresh = time.monotonic() - self._checked_at
        return self._up and fresh < _STALE_AFTER_CHECKS * self._interval + self._timeout

    async def run(self) -> None:
        while True:
            try:
                await self.check()
            except Exception:
                log.exception(
                    "engine %s: check failed; it counts as down until one passes", self.label
                )
                self._set_up(False)
            await asyncio.sleep(self._interval)

    async def check(self) -> None:
        was_up = self._up
        try:
            response = await self._client.get(self.url, "/health", timeout=self._timeout)
            up = response.status_code == 200
        except httpx.HTTPError:
            up = False
        if up and (not was_up or not self.models):
            up = await self.refresh_models()
        if up:
            await self._read_stats()
        self._set_up(up)

    def mark_down(self) -> None:
        """Called when a request could not reach the engine: it is ejected
        now rather than at the next check, and readmitted once one passes."""
        self._set_up(False)

    def _set_up(self, up: bool) -> None:
        changed = up != self._up
        if changed:
            log.warning("engine %s is %s", self.label, "up" if up else "DOWN (ejected)")
            if not up:
                self._ejections.inc()
        self._up = up
        self._checked_at = time.monotonic()
        self._up_gauge.set(1 if up else 0)
        if changed:
            self._on_state(self.url, up, frozenset(self.models))

    async def refresh_models(self) -> bool:
        try:
            response = await self._client.get(self.url, "/v1/models", timeout=self._timeout)
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
        changed = models.keys() != self.models.keys()
        self.models = models
        self._models_at = time.monotonic()
        if changed and self._up:
            self._on_state(self.url, True, frozenset(models))
        return bool(models)

    @property
    def models_age(self) -> float:
        return time.monotonic() - self._models_at

    async def _read_stats(self) -> None:
        try:
            response = await self._client.get(self.url, "/metrics", timeout=self._timeout)
        except httpx.HTTPError:
            return
        if response.status_code != 200:
            return
        stats = parse_engine_stats(response.text)
        if stats.missing != self._missing:
            if stats.missing:
                log.error(
                    "engine %s: its /metrics lacks %s; admission falls back to its conservative"
                    " limits until they are back",
                    self.label,
                    ", ".join(stats.missing),
                )
            else:
                log.warning("engine %s: its /metrics has what admission reads again", self.label)
            self._missing = stats.missing
        self._missing_gauge.set(len(stats.missing))
        self._on_stats(self.url, stats)


def engine_label(url: str) -> str:
    """An engine's name in metrics and logs: its URL without the scheme."""
    return url.split("://", 1)[-1]
