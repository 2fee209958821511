"""The gateway's Prometheus metrics, on a registry of their own per app.

The names and labels are a contract: the dashboards, the alert rules and
the load reports read them (no colons: those are for recording rules).
Label values that dashboards break out are created at start so their series
exist from the first scrape.
"""

import platform
from collections.abc import Callable
from contextlib import suppress
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics

from app import __version__
from app.observe.batch_metrics import BatchSeries
from app.observe.cold_start import ColdStartSeries
from app.observe.model_metrics import ModelSeries
from app.observe.on_collect import OnCollect
from app.request.errors import REJECTION_REASONS
from app.request.identity import PRIORITIES
from app.request.routes import ROUTES

OUTCOMES = ("completed", "rejected", "cancelled", "failed")
PROMPT_COUNT_SOURCES = ("tokenizer", "engine", "estimate")
CANCEL_PHASES = ("receiving", "queued", "waiting_first_token", "streaming", "non_streaming")

_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_GAP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


_M = TypeVar("_M", Gauge, Counter)


class GatewayMetrics:
    def __init__(self) -> None:
        # The ``*_created`` series only double the scrape size here.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # First on the registry, so its writers run before any metric is
        # collected (``app.observe.on_collect``; the registry keeps their order).
        self._on_collect = OnCollect()
        r.register(self._on_collect)
        # Every series labelled by engine, so that one that leaves takes all of its own along.
        self._engine_metrics: list[Gauge | Counter] = []
        self._shares_state = False
        self.requests = Counter(
            "gateway_requests", "Requests by final outcome.", ["route", "outcome"], registry=r
        )
        self.rejections = Counter(
            "gateway_rejections",
            "Requests refused before the engine saw them.",
            ["reason"],
            registry=r,
        )
        self.cancellations = Counter(
            "gateway_cancellations",
            "Requests whose client went away, by phase.",
            ["phase"],
            registry=r,
        )
        self.in_flight = Gauge(
            "gateway_requests_in_flight", "Requests admitted and currently upstream.", registry=r
        )
        self.queue_depth = Gauge(
            "gateway_queue_depth", "Requests waiting for admission.", ["priority"], registry=r
        )
        self.queue_wait = Histogram(
            "gateway_queue_wait_seconds",
            "Arrival to admission.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "gateway_time_to_first_token_seconds",
            "Arrival to the first content token sent to the client.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.inter_token = Histogram(
            "gateway_inter_token_latency_seconds",
            "Gap between streamed chunks.",
            buckets=_GAP_BUCKETS,
            registry=r,
        )
        self.duration = Histogram(
            "gateway_request_duration_seconds",
            "Arrival to last byte, by outcome (served and refused apart).",
            ["route", "outcome"],
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "gateway_tokens", "Tokens of completed or cancelled requests.", ["kind"], registry=r
        )
        self.models = ModelSeries(r, OUTCOMES)
        # Per engine (label ``engine``: its URL without the scheme).
        self.kv_capacity = self._per_engine(
            Gauge(
                "gateway_kv_tokens_capacity",
                "Engine KV cache size in tokens, as the gateway sees it.",
                ["engine"],
                registry=r,
            )
        )
        self.kv_reserved = self._per_engine(
            Gauge(
                "gateway_kv_tokens_reserved",
                "KV tokens reserved by requests this gateway admitted.",
                ["engine"],
                registry=r,
            )
        )
        self.kv_budget = self._per_engine(
            Gauge(
                "gateway_kv_tokens_budget",
                "KV tokens admission currently allows to be reserved on the engine.",
                ["engine"],
                registry=r,
            )
        )
        self.upstream_up = self._per_engine(
            Gauge(
                "gateway_upstream_up",
                "1 while the engine is not ejected: 0 once a check failed or a request could not"
                " connect (a check that is only late under load ejects nothing).",
                ["engine"],
                registry=r,
            )
        )
        self.engine_in_flight = self._per_engine(
            Gauge(
                "gateway_engine_requests_in_flight",
                "Requests this gateway admitted to the engine, now upstream.",
                ["engine"],
                registry=r,
            )
        )
        self.engine_routed = self._per_engine(
            Counter(
                "gateway_engine_requests",
                "Requests admitted to the engine.",
                ["engine"],
                registry=r,
            )
        )
        self.engine_ejections = self._per_engine(
            Counter(
                "gateway_engine_ejections",
                "Times the engine was taken out of routing (failed health checks, refused"
                " connections).",
                ["engine"],
                registry=r,
            )
        )
        self.engine_sequence_cap = self._per_engine(
            Gauge(
                "gateway_engine_sequence_cap",
                "Sequences admission runs on the engine at most (its --max-num-seqs once learned).",
                ["engine"],
                registry=r,
            )
        )
        self.fleet_kv_reserved = self._per_engine(
            Gauge(
                "gateway_fleet_kv_tokens_reserved",
                "KV tokens every gateway replica holds on the engine, read from the shared state"
                " (every replica reports the same value: aggregate with max).",
                ["engine"],
                registry=r,
            )
        )
        # Exported only by a replica that shares state (``track_shared_state``):
        # one without Redis has nothing that could be down.
        self.shared_state_up = Gauge(
            "gateway_shared_state_up",
            "1 while the state shared with other replicas (Redis) answers; 0: this replica"
            " runs on its share of the fleet.",
            registry=None,
        )
        self.affinity_hits = self._per_engine(
            Counter(
                "gateway_routing_affinity_hits",
                "Requests routed to the engine their prompt prefix prefers (prefix routing).",
                ["engine"],
                registry=r,
            )
        )
        self.affinity_waits = self._per_engine(
            Counter(
                "gateway_routing_affinity_waits",
                "Requests that waited for the engine (the label) reporting the most of their"
                " prompt while another had room (GATEWAY_ROUTING_AFFINITY_WAIT), counted when"
                " admitted: to it (an affinity hit) or, the wait over, elsewhere.",
                ["engine"],
                registry=r,
            )
        )
        self.load_cap_overrides = self._per_engine(
            Counter(
                "gateway_routing_load_cap_overrides",
                "Requests sent away from the engine their prefix prefers (the label) because it"
                " was loaded past the cap.",
                ["engine"],
                registry=r,
            )
        )
        self.kv_events_up = self._per_engine(
            Gauge(
                "gateway_kv_events_up",
                "1 while the engine's KV cache events arrive in sequence (what it holds is known"
                " to routing); 0 while they are disconnected or a gap is being filled.",
                ["engine"],
                registry=r,
            )
        )
        self.kv_blocks_held = self._per_engine(
            Gauge(
                "gateway_kv_blocks_held",
                "KV cache blocks the engine reports holding (from its KV cache events).",
                ["engine"],
                registry=r,
            )
        )
        self.kv_event_gaps = self._per_engine(
            Counter(
                "gateway_kv_event_gaps",
                "Gaps in the engine's KV cache event sequence (filled from its replay, or the"
                " engine's index started afresh).",
                ["engine"],
                registry=r,
            )
        )
        self.kv_fallbacks = Counter(
            "gateway_routing_kv_fallbacks",
            "Requests ranked by their prompt's approximate prefix key although KV cache events"
            " are on: their token ids were not known (token_ids), or an engine's events were not"
            " live (events).",
            ["reason"],
            registry=r,
        )
        self.engine_retries = self._per_engine(
            Counter(
                "gateway_engine_retries",
                "Requests retried on another engine after this one failed them before any byte"
                " reached the client.",
                ["engine"],
                registry=r,
            )
        )
        self.evictions = Counter(
            "gateway_evictions",
            "Running requests of a sheddable class stopped for a higher one that would miss"
            " its objective: confirmed (the engine's running count did not grow and the"
            " blocked request started there at its next report) or wasted.",
            ["engine", "outcome"],
            registry=r,
        )
        self.recompute_share = self._per_engine(
            Gauge(
                "gateway_engine_recompute_share",
                "Of what the engine generated over the last readings, the share it computed"
                " again after preemptions (an estimate; GATEWAY_PREEMPTION_BUDGET bounds it).",
                ["engine"],
                registry=r,
            )
        )
        self.draining = Gauge(
            "gateway_draining", "1 while the gateway drains before shutdown.", registry=r
        )
        self.engine_stats_missing = self._per_engine(
            Gauge(
                "gateway_engine_stats_missing",
                "Series admission reads that the engine's /metrics lacks (0 when all are there).",
                ["engine"],
                registry=r,
            )
        )
        self.tenant_tokens = Counter(
            "gateway_tenant_tokens",
            "Tokens per tenant named in the keys file: admitted (charged against its limit"
            " when admitted, between its estimate and its worst case) and used (what the"
            " engine reported).",
            ["tenant", "kind"],
            registry=r,
        )
        self.tenant_rejections = Counter(
            "gateway_tenant_rejections",
            "Refusals per tenant named in the keys file, by reason.",
            ["tenant", "reason"],
            registry=r,
        )
        self.keys_reload_failures = Counter(
            "gateway_keys_reload_failures",
            "Reloads of the keys file that failed (the previous keys stay in use).",
            registry=r,
        )
        self.event_loop_lag = Gauge(
            "gateway_event_loop_lag_seconds",
            "The longest delay of the event loop's half-second timer over the last 30 s: time"
            " every request waited while the loop was busy or the process had no core.",
            registry=r,
        )
        self.first_event_added = Histogram(
            "gateway_first_event_added_seconds",
            "What the gateway adds to a stream's first event: from reading it from the engine"
            " to handing it to the client's connection.",
            buckets=_GAP_BUCKETS,
            registry=r,
        )
        self.added_latency = Histogram(
            "gateway_added_latency_seconds",
            "What everything in front of the engine's core added to a completed request beyond"
            " its wait in the gateway's queue (the gateway, the engine's HTTP server, the way"
            " between): a stream's admission to its first token here less the engine's own"
            " queue and time to first token; a whole answer's admission to its end less all of"
            " the engine's time. Only where the engine gives its per-request figures.",
            ["route"],
            buckets=_GAP_BUCKETS,
            registry=r,
        )
        self.engine_timing_missing = Counter(
            "gateway_engine_timing_missing",
            "Completed requests whose engine gave no per-request figures (routes without them,"
            " n > 1, an engine without --enable-per-request-metrics): no added latency for them.",
            ["route"],
            registry=r,
        )
        self.build_info = Gauge(
            "gateway_build_info",
            "Always 1; the labels say which gateway runs (its version, its Python).",
            ["version", "python"],
            registry=r,
        )
        self.build_info.labels(__version__, platform.python_version()).set(1)
        self.prompts_counted = Counter(
            "gateway_prompts_counted",
            "Prompts whose tokens were counted, by how: the gateway's copy of the model's"
            " tokenizer, the engine's /tokenize, or an estimate from their length (a source"
            " that failed or is off).",
            ["source"],
            registry=r,
        )
        self.cold_starts = ColdStartSeries(r)
        self.batches = BatchSeries(r)
        self.receiving = Gauge(
            "gateway_requests_receiving",
            "Requests whose body is being read or checked, before admission.",
            registry=r,
        )

        for route in ROUTES:  # the ``route`` label: the admitted API routes
            for outcome in OUTCOMES:
                self.requests.labels(route, outcome)
                self.duration.labels(route, outcome)
            self.added_latency.labels(route)
            self.engine_timing_missing.labels(route)
        for reason in REJECTION_REASONS:
            self.rejections.labels(reason)
        for phase in CANCEL_PHASES:
            self.cancellations.labels(phase)
        for priority in PRIORITIES:
            self.queue_depth.labels(priority)
        for kind in ("prompt", "completion"):
            self.tokens.labels(kind)
        for source in PROMPT_COUNT_SOURCES:
            self.prompts_counted.labels(source)
        for fallback in ("token_ids", "events"):
            self.kv_fallbacks.labels(fallback)

    def on_collect(self, writer: Callable[[], None]) -> None:
        """Have ``writer`` bring gauges up to date whenever the registry
        is collected, before any of them is read."""
        self._on_collect.add(writer)

    def _per_engine(self, metric: _M) -> _M:
        self._engine_metrics.append(metric)
        return metric

    def forget_engine(self, engine: str) -> None:
        """Remove every series of an engine that left the fleet (by its label),
        so nothing about it lingers: no stale "engines up", no alert firing
        for an address that is gone."""
        for metric in self._engine_metrics:
            with suppress(KeyError):
                metric.remove(engine)

    def track_shared_state(self) -> Gauge:
        """``gateway_shared_state_up``, exported from now on."""
        if not self._shares_state:
            self._shares_state = True
            self.registry.register(self.shared_state_up)
        return self.shared_state_up
