"""The engines the gateway sends to: one monitor each, discovery, ejection.

Each engine has its monitor (health, models, metrics). An engine that fails
its health check, or refuses a request's connection, is ejected — admission
places nothing on it — and readmitted once a check passes again; a check
that is only late under load ejects nothing (see ``app.engine.monitor``).

Requests go to the engines that are up: not ejected and heard from lately.
When none is, the gateway does not refuse everything on a doubt: it routes
to every engine that is not ejected (a panic threshold of zero), so a
gateway that merely lost track of a busy engine keeps serving, and only
engines known dead leave it with nowhere to go. That rule is here once
(``routable``); admission, the retry rule and readiness read it through
the pool's view of each engine (``app.engine.view``), announced to
listeners when the engine is found. ``/health/ready`` is 200,
and ``gateway_upstream_up`` 1, for an engine not ejected. With a DNS
name, the list is resolved again every few seconds: engines that appear are
monitored, engines that disappear are forgotten (what they still run
finishes). ``/v1/models`` is the union of what the engines that are up
serve.

With ``GATEWAY_KV_EVENTS_ENDPOINT``, each engine also has a subscriber to
its KV cache events beside its monitor (``app.engine.kv_events``), found
beside its URL and started and forgotten with it; it keeps the engine's
``BlockIndex`` in ``kv_indexes``, which routing reads.
"""

import asyncio
import logging
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import zmq.asyncio

from app.engine.aliases import parse_aliases
from app.engine.catalog import ModelCatalog
from app.engine.client import EngineClient
from app.engine.cold_models import parse_cold_models
from app.engine.discovery import engine_urls, is_dns, resolve
from app.engine.kv_events import endpoint_for
from app.engine.kv_subscriber import KvEventSubscriber
from app.engine.monitor import ChangeListener, EngineMonitor, StatsListener, engine_label
from app.engine.stats import KV_USAGE, PREEMPTIONS, EngineStats, LoraSlots
from app.engine.view import EngineView
from app.observe.metrics import GatewayMetrics
from app.routing.base import EngineLoad
from app.routing.block_index import BlockIndex
from app.settings import Settings

log = logging.getLogger("gateway.engine")


class EnginePool:
    def __init__(self, settings: Settings, client: EngineClient, metrics: GatewayMetrics) -> None:
        self._settings = settings
        self._client = client
        self._metrics = metrics
        self._configured = engine_urls(settings.upstream_urls, settings.upstream_url)
        self.monitors: dict[str, EngineMonitor] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.views: dict[str, EngineView] = {}
        self._engine_listeners: list[Callable[[EngineView], None]] = []
        self._change_listeners: list[ChangeListener] = []
        self._stats_listeners: list[StatsListener] = []
        self._forget_listeners: list[Callable[[str], None]] = []
        # What the engines requests may go to serve, and the aliases.
        self.catalog = ModelCatalog(
            self.up_engines,
            parse_aliases(settings.model_aliases),
            parse_cold_models(settings.cold_models),
        )
        # What each engine reports holding (KV cache events), by URL.
        self.kv_indexes: dict[str, BlockIndex] = {}
        self._kv: dict[str, KvEventSubscriber] = {}
        self._kv_context: zmq.asyncio.Context | None = None
        # How many times the engines were looked for (a test waits on it).
        self.resolved = 0
        if settings.kv_events_endpoint is not None:
            # A template that cannot make an endpoint fails the start.
            for template in (settings.kv_events_endpoint, settings.kv_events_replay_endpoint):
                if template is not None:
                    endpoint_for(template, "http://127.0.0.1:8000")

    # --- listeners (admission) ----------------------------------------------

    def on_engine(self, listener: Callable[[EngineView], None]) -> None:
        """Called with each engine's view when the engine is found."""
        self._engine_listeners.append(listener)

    def on_change(self, listener: ChangeListener) -> None:
        """Called when an engine goes up or down or its models change."""
        self._change_listeners.append(listener)

    def on_stats(self, listener: StatsListener) -> None:
        self._stats_listeners.append(listener)

    def on_forget(self, listener: Callable[[str], None]) -> None:
        self._forget_listeners.append(listener)

    # --- running ---------------------------------------------------------------

    async def start(self) -> None:
        """Find the engines and check each once (before the first request)."""
        await self._discover()
        await asyncio.gather(*(m.check() for m in self.monitors.values()))

    async def run(self) -> None:
        """Monitor every engine; re-resolve a DNS name periodically."""
        try:
            for url in list(self.monitors):
                self._start_monitor(url)
            while True:
                await asyncio.sleep(self._settings.upstream_dns_interval)
                if is_dns(self._configured):
                    await self._discover()
                    for url in self.monitors:
                        if url not in self._tasks:
                            self._start_monitor(url)
        finally:
            for task in self._tasks.values():
                task.cancel()
            for task in self._tasks.values():
                with suppress(asyncio.CancelledError):
                    await task
            if self._kv_context is not None:
                self._kv_context.destroy(linger=0)

    async def _discover(self) -> None:
        urls = await resolve(self._configured[0]) if is_dns(self._configured) else self._configured
        self.resolved += 1
        if urls is None:
            return  # a failed lookup keeps the engines we know
        if not urls and self.monitors and not self.catalog.cold:
            # Nor does a name with no address, unless the pool scales to
            # zero (cold models): else all engines gone would hide as none.
            return
        for url in urls:
            if url not in self.monitors:
                log.info("engine %s added", url)
                monitor = EngineMonitor(
                    url, self._client, self._settings, self._metrics, self._changed, self._stats
                )
                self.monitors[url] = monitor
                self.views[url] = view = _PooledView(self, monitor)
                self._subscribe(url)
                for announce in self._engine_listeners:
                    announce(view)
        for url in [u for u in self.monitors if u not in urls]:
            log.warning("engine %s no longer discovered: forgotten", url)
            del self.monitors[url]
            del self.views[url]
            for key in (url, _kv_task(url)):
                task = self._tasks.pop(key, None)
                if task is not None:
                    task.cancel()
            self._kv.pop(url, None)
            self.kv_indexes.pop(url, None)
            for listener in self._forget_listeners:
                listener(url)
            self._metrics.forget_engine(engine_label(url))

    def _start_monitor(self, url: str) -> None:
        self._tasks[url] = asyncio.create_task(self.monitors[url].run(), name=f"engine {url}")
        subscriber = self._kv.get(url)
        if subscriber is not None:
            self._tasks[_kv_task(url)] = asyncio.create_task(
                subscriber.run(), name=f"engine {url} KV events"
            )

    def _subscribe(self, url: str) -> None:
        """The engine's KV cache events, when configured (started with its
        monitor)."""
        settings = self._settings
        if settings.kv_events_endpoint is None:
            return
        if self._kv_context is None:
            self._kv_context = zmq.asyncio.Context()
        replay = settings.kv_events_replay_endpoint
        self.kv_indexes[url] = index = BlockIndex()
        self._kv[url] = KvEventSubscriber(
            engine_label(url),
            endpoint_for(settings.kv_events_endpoint, url),
            None if replay is None else endpoint_for(replay, url),
            index,
            self._metrics,
            self._kv_context,
        )

    def _changed(self, url: str) -> None:
        for listener in self._change_listeners:
            listener(url)

    def _stats(self, url: str, stats: Any) -> None:
        for listener in self._stats_listeners:
            try:
                listener(url, stats)
            except Exception:
                log.exception("engine stats listener failed")

    # --- what the pipeline asks -------------------------------------------------

    @property
    def up(self) -> bool:
        """There is an engine to route to."""
        return bool(self.up_engines())

    def routable(self, monitor: EngineMonitor) -> bool:
        """Whether requests may go to the engine now: it is up or, when no
        engine is, not ejected."""
        if monitor.up:
            return True
        return not monitor.ejected and not any(m.up for m in self.monitors.values())

    def up_engines(self) -> list[EngineMonitor]:
        """The engines requests may go to now (``routable``)."""
        return [m for m in self.monitors.values() if self.routable(m)]

    def engine_for(self, model: str) -> str | None:
        """An engine requests may go to that serves ``model`` (the first:
        for light calls, such as /tokenize, any will do), or None."""
        for monitor in self.up_engines():
            if model in monitor.model_names:
                return monitor.url
        return None

    def candidates(self) -> list[EngineLoad]:
        """Every engine as routing sees it (its filters drop those not routable)."""
        return [EngineLoad(id=v.url, up=v.routable, models=v.models) for v in self.views.values()]

    def status(self) -> list[dict[str, Any]]:
        """Each engine as the pool sees it (``/status``)."""
        return [
            {
                "url": url,
                "routable": self.routable(monitor),
                "ejected": monitor.ejected,
                "heard_from_lately": monitor.up,
                "models": dict(monitor.models),
                "engine": _engine_said(monitor.stats),
                **self._kv_status(url),
            }
            for url, monitor in self.monitors.items()
        ]

    def _kv_status(self, url: str) -> dict[str, Any]:
        index = self.kv_indexes.get(url)
        if index is None:
            return {}
        return {"kv_events": {"live": index.live, "blocks_held": len(index)}}

    def mark_down(self, url: str) -> None:
        monitor = self.monitors.get(url)
        if monitor is not None:
            monitor.mark_down()


def _engine_said(stats: EngineStats | None) -> dict[str, Any] | None:
    """What the engine's own /metrics said last: its scheduler's counts,
    its KV cache's use, its preemptions since it started."""
    if stats is None:
        return None
    return {
        "running": stats.running if stats.counts_seen else None,
        "waiting": stats.waiting if stats.counts_seen else None,
        "kv_usage": None if KV_USAGE in stats.missing else round(stats.kv_usage, 4),
        "preemptions_total": None if PREEMPTIONS in stats.missing else stats.preemptions_total,
    }


class _PooledView:
    """The pool's view of one engine (an ``EngineView``): what its monitor
    knows, and the pool's rule for whether requests may go to it."""

    __slots__ = ("_monitor", "_pool")

    def __init__(self, pool: EnginePool, monitor: EngineMonitor) -> None:
        self._pool = pool
        self._monitor = monitor

    @property
    def url(self) -> str:
        return self._monitor.url

    @property
    def routable(self) -> bool:
        return self._pool.routable(self._monitor)

    @property
    def models(self) -> frozenset[str]:
        return self._monitor.model_names

    @property
    def adapters(self) -> frozenset[str]:
        return self._monitor.adapters

    @property
    def lora(self) -> LoraSlots | None:
        return self._monitor.lora


def _kv_task(url: str) -> str:
    return f"{url} KV events"
