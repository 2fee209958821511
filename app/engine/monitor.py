"""What the gateway knows about one engine, kept fresh by one background loop.

Every ``health_interval`` seconds: the engine's ``/health`` (drives
``gateway_upstream_up`` and readiness), its model list when unknown, after
the engine comes back and every ``models_interval`` (LoRA adapters are
loaded and unloaded while it runs), and its ``/metrics``, parsed once and
handed to listeners (admission reads KV capacity and preemptions from it,
routing the adapters in its LoRA slots).

An engine is down when it is dead, not when it is busy. It is ejected
(``gateway_upstream_up`` 0, ``gateway_engine_ejections_total`` counts it, a
"DOWN (ejected)" log line, admission places nothing on it) when a check
fails — the connection refused or not made, ``/health`` not 200, no model
list — or when a request's connection to it is refused. A check
that is merely late is not a failure: under load ``/health`` and the engine's
large ``/metrics`` answer slowly, and a check that times out while the
engine's answers to requests keep arriving (the engine client notes their
last byte) or that waits for the gateway's own full connection pool leaves
the verdict as it was. A check that times out with no traffic from the
engine is a hung engine, and ejects it. So ``gateway_upstream_up`` 0, and
the ejection alerts that watch it, mean an engine known dead or hung, never
one that is only slow to answer its checks.

``up`` is stricter than "not ejected": the engine is also heard from lately
— a check passed within a few intervals, a check is in progress, or bytes of
an answer arrived. That guards against a loop that died on an unexpected
error, which would leave the last answer standing forever (the loop also
survives any error). An engine not heard from lately is a doubt, not a
death: it is not ejected, and the pool still routes to it when no engine is
up (see ``app.engine.pool``).

An engine whose metrics lack the series admission reads is not taken for an
idle one — ``gateway_engine_stats_missing`` counts the missing series, a log
line names them, and admission falls back (see the policy).
"""

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from app.engine.client import EngineClient
from app.engine.stats import EngineStats, LoraSlots, parse_engine_stats
from app.observe.metrics import GatewayMetrics
from app.request.errors import GatewayError, PoolExhausted, UpstreamTimeout
from app.settings import Settings

log = logging.getLogger("gateway.engine")

StatsListener = Callable[[str, EngineStats], None]
# Called with the engine's URL when it goes up or down or its models change.
ChangeListener = Callable[[str], None]
# A health answer, or an answer's last byte, is trusted for this many check
# intervals (plus one check's timeout).
_STALE_AFTER_CHECKS = 3


class EngineMonitor:
    def __init__(
        self,
        url: str,
        client: EngineClient,
        settings: Settings,
        metrics: GatewayMetrics,
        on_change: ChangeListener,
        on_stats: StatsListener,
    ) -> None:
        self.url = url
        self.label = engine_label(url)
        self._client = client
        self._interval = settings.health_interval
        self._timeout = settings.health_timeout
        self._on_change = on_change
        self._on_stats = on_stats
        self._up = False
        self._checked_at = -float("inf")
        self._checking = False
        self._missing: tuple[str, ...] = ()
        self._models_interval = settings.models_interval
        # Model name → context length, and the names alone (what routing reads).
        self.models: dict[str, int | None] = {}
        self.model_names: frozenset[str] = frozenset()
        # Each model's entry in the engine's /v1/models, as it wrote it.
        self.entries: dict[str, dict[str, Any]] = {}
        # The names that are LoRA adapters (their entry names a parent).
        self.adapters: frozenset[str] = frozenset()
        # Its LoRA slots and the adapters in them, from its /metrics.
        self.lora: LoraSlots | None = None
        # What its /metrics said last (None: nothing read yet).
        self.stats: EngineStats | None = None
        self._models_at = 0.0
        self._up_gauge = metrics.upstream_up.labels(self.label)
        self._missing_gauge = metrics.engine_stats_missing.labels(self.label)
        self._ejections = metrics.engine_ejections.labels(self.label)
        self._up_gauge.set(0)

    @property
    def ejected(self) -> bool:
        """The last verdict: a check failed or a request could not reach it."""
        return not self._up

    @property
    def up(self) -> bool:
        """Not ejected, and heard from lately (a check passed, one is under
        way, or bytes of an answer arrived)."""
        if not self._up or self._checking:
            return self._up
        heard = max(self._checked_at, self._client.heard_at(self.url))
        return time.monotonic() - heard < _STALE_AFTER_CHECKS * self._interval + self._timeout

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
        self._checking = True
        try:
            verdict = await self._verdict()
        finally:
            self._checking = False
        if verdict is not None:
            self._set_up(verdict)

    async def _verdict(self) -> bool | None:
        """Whether the engine passes its check; None when the check was only
        late while the engine shows life (the verdict stands as it was)."""
        try:
            response = await self._client.get(self.url, "/health", timeout=self._timeout)
        except PoolExhausted:
            return None  # the gateway's own pool is full: nothing about the engine
        except UpstreamTimeout:
            # Reached, and late to answer.
            return None if self._heard_lately() else False
        except GatewayError:
            return False
        if response.status != 200:
            return False
        if not self._up or not self.models:
            if not await self.refresh_models():
                return False
        elif self.models_age >= self._models_interval:
            # A failed refresh keeps the list it had: the health check decides.
            await self.refresh_models()
        await self._read_stats()
        return True

    def _heard_lately(self) -> bool:
        """Bytes of an answer to a request arrived from the engine lately."""
        since = time.monotonic() - self._client.heard_at(self.url)
        return since < _STALE_AFTER_CHECKS * self._interval + self._timeout

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
            self._on_change(self.url)

    async def refresh_models(self) -> bool:
        try:
            response = await self._client.get(self.url, "/v1/models", timeout=self._timeout)
            data: Any = json.loads(response.body)
        except (GatewayError, ValueError):
            return False
        if response.status != 200 or not isinstance(data, dict):
            return False
        models: dict[str, int | None] = {}
        entries: dict[str, dict[str, Any]] = {}
        for entry in data.get("data") or ():
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                length = entry.get("max_model_len")
                models[entry["id"]] = length if isinstance(length, int) else None
                entries[entry["id"]] = entry
        changed = models.keys() != self.models.keys()
        self.models, self.model_names, self.entries = models, frozenset(models), entries
        self.adapters = frozenset(name for name, e in entries.items() if e.get("parent"))
        self._models_at = time.monotonic()
        if changed and self._up:
            self._on_change(self.url)
        return bool(models)

    @property
    def models_age(self) -> float:
        return time.monotonic() - self._models_at

    async def _read_stats(self) -> None:
        try:
            response = await self._client.get(self.url, "/metrics", timeout=self._timeout)
        except GatewayError:
            return
        if response.status != 200:
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
        self.lora = stats.lora
        self.stats = stats
        self._on_stats(self.url, stats)


def engine_label(url: str) -> str:
    """An engine's name in metrics and logs: its URL without the scheme."""
    return url.split("://", 1)[-1]
