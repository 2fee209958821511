"""Every dashboard query, run by a real Prometheus against a real stack.

Prometheus runs with the project's local config (targets filled in for this
run) and rules. Load through seven gateways in front of one real engine makes
every label value a panel breaks out: each outcome, rejection reason,
cancellation phase and queue priority, engine preemptions; a keyed tenant
at its limit; prefix affinity and its load cap over two engines (the one
engine under two names), shared state in a real Redis, an engine stalled,
ejected and readmitted, a request retried. Then every panel query of every
dashboard goes through Prometheus' HTTP API and must return series.
"""

import asyncio
import re
import shutil
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from dashboards import build, snapshot
from deploy.local import ROOT, ManagedProcess, free_port
from tests.observability import live_fleet, live_load
from tests.observability.test_dashboards import load, queries
from tests.support.engines import Engine
from tests.support.gateways import Gateway, launch_gateway
from tests.support.redis_server import RedisServer
from tests.support.trace_backend import TraceBackend
from tests.support.wait import wait_until

RATE_INTERVAL = "1m"
# Longer than the whole run: every sample of it.
RUN = "[1h]"
# Grafana's variables, as Prometheus is asked with "All" chosen.
VARIABLES = {"$__rate_interval": RATE_INTERVAL, "$model": ".*", "$tenant": ".*"}


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str) -> list[dict[str, Any]]:
        reply = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=30)
        body = reply.json()
        assert body["status"] == "success", f"{expr}: {body}"
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def scraped_after(self, since: float) -> float | None:
        """When the latest of the targets' last scrapes was, if the engine
        and every target still up were scraped successfully after ``since``
        (a Unix time); else None."""
        # ``timestamp`` of a bare selector: when each sample was scraped (of
        # an expression it would be the query's own time).
        up = {_target(s): s["value"][1] == "1" for s in self.query("up")}
        scraped = [float(s["value"][1]) for s in self.query("timestamp(up)") if up[_target(s)]]
        engine_up = any(ok for (job, _), ok in up.items() if job == "vllm")
        if not engine_up or not scraped or min(scraped) <= since:
            return None
        return max(scraped)

    def evaluated_after(self, since: float) -> bool:
        """Whether every rule group was evaluated after ``since``."""
        groups = httpx.get(f"{self.url}/api/v1/rules", timeout=30).json()["data"]["groups"]
        return bool(groups) and all(_unix(g["lastEvaluation"]) > since for g in groups)

    def exemplars(self, expr: str, start: float, end: float) -> list[dict[str, Any]]:
        """The exemplars of the series ``expr`` selects, between two Unix times."""
        reply = httpx.get(
            f"{self.url}/api/v1/query_exemplars",
            params={"query": expr, "start": start, "end": end},
            timeout=30,
        )
        body = reply.json()
        assert body["status"] == "success", f"{expr}: {body}"
        found: list[dict[str, Any]] = body["data"]
        return found

    def label_values(self, expr: str, label: str) -> set[str]:
        """The label's values among the series whose value is above 0."""
        return {s["metric"][label] for s in self.query(expr) if float(s["value"][1]) > 0}

    def labels(self, expr: str, label: str) -> set[str]:
        """The label's values among all the series, whatever their value."""
        return {s["metric"][label] for s in self.query(expr)}


def _target(series: dict[str, Any]) -> tuple[str, str]:
    return series["metric"]["job"], series["metric"]["instance"]


def _unix(rfc3339: str) -> float:
    """A time of Prometheus's API (RFC 3339, nanoseconds, UTC "Z") as a Unix time."""
    stamp = re.sub(r"(\.\d{6})\d*", r"\1", rfc3339).replace("Z", "+00:00")
    return datetime.fromisoformat(stamp).timestamp()


def prometheus_config(engine: str, gateways: list[str]) -> str:
    config = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.local.yml").read_text())
    config["global"]["scrape_interval"] = "1s"
    config["global"]["evaluation_interval"] = "1s"
    config["rule_files"] = [str(ROOT / "deploy/prometheus/rules/*.yml")]
    targets = {"gateway": gateways, "vllm": [engine]}
    for job in config["scrape_configs"]:
        job["static_configs"] = [{"targets": targets[job["job_name"]]}]
    return yaml.safe_dump(config)


def start_gateways(
    engine: Engine, redis: RedisServer, keys_file: Path, logs: Path, traces: TraceBackend
) -> dict[str, Gateway]:
    """The seven gateways; two of them traced (their latency histograms then
    carry exemplars)."""
    traced = {"admission", "direct"}
    names = ",".join(live_fleet.engine_names(engine))
    settings: dict[str, tuple[str, dict[str, object]]] = {
        # Admission on with a tiny queue: queue_full, queue_timeout, queued cancels.
        "admission": (
            engine.url,
            {"max_concurrency": 2, "queue_max_depth": 4, "queue_timeout": 1.5},
        ),
        # Admission off: engine-side waiting, preemptions, cancels in every engine phase.
        "direct": (engine.url, {"admission": "off", "drain_grace_seconds": 20}),
        # An engine that is not there: unavailable.
        "no-engine": (f"http://127.0.0.1:{free_port()}", {}),
        # A non-streaming limit shorter than any long answer: failed (504);
        # one body received at a time, within a second: overloaded, body_timeout.
        "impatient": (
            engine.url,
            {"upstream_non_stream_timeout": 0.1, "max_receiving": 1, "body_timeout": 1},
        ),
        # A keys file: unauthorized, forbidden, rate_limited, per-tenant series.
        "keyed": (engine.url, {"keys_file": keys_file, "rate_limit_window": 600}),
        # Two engines, prefix routing, state shared through Redis. Overcommit
        # from the start, so that five requests fit on one engine name.
        "fleet": (
            engine.url,
            {
                "upstream_urls": names,
                "routing": "prefix",
                "redis_url": redis.url,
                "overcommit_initial": 2,
            },
        ),
        # Two engines; a request gives up on a silent engine long before a
        # health check does: a retry, then ejections.
        "failover": (
            engine.url,
            {"upstream_urls": names, "health_timeout": 10, "upstream_read_timeout": 2},
        ),
    }
    gateways: dict[str, Gateway] = {}
    try:
        for name, (upstream, extra) in settings.items():
            environ = traces.gateway_environ() if name in traced else None
            gateways[name] = launch_gateway(logs, upstream, extra, environ=environ)
    except BaseException:
        for gateway in gateways.values():
            gateway.process.stop()
        raise
    return gateways


@pytest.fixture(scope="module")
def prometheus(
    engine: Engine, trace_backend: TraceBackend, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Prometheus, dict[str, Gateway]]]:
    binary = shutil.which("prometheus")
    assert binary, "prometheus is missing: install Debian's prometheus package (.ci/run does)"
    logs = tmp_path_factory.mktemp("observability")
    redis = RedisServer(logs)
    gateways: dict[str, Gateway] = {}
    proc: ManagedProcess | None = None
    try:
        redis.start()
        key = live_fleet.write_tenant_keys_file(logs / "keys.yml")
        gateways = start_gateways(engine, redis, logs / "keys.yml", logs, trace_backend)
        config = logs / "prometheus.yml"
        config.write_text(
            prometheus_config(
                engine.url.removeprefix("http://"),
                [g.url.removeprefix("http://") for g in gateways.values()],
            )
        )
        port = free_port()
        proc = ManagedProcess(
            "prometheus",
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={logs / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--enable-feature=exemplar-storage",
            ],
            {},
            logs,
        )
        url = f"http://127.0.0.1:{port}"
        proc.wait_http(f"{url}/-/ready", timeout=60)
        prom = Prometheus(url)
        targets = len(gateways) + 1
        assert wait_until(lambda: len(prom.query("up == 1")) == targets, timeout=60)
        asyncio.run(drive_load(engine, gateways, key))
        # The engine was stopped (SIGSTOP) near the end: its series are stale
        # until Prometheus has scraped it again. Wait for a scrape of every
        # target still running made after the load, and a rule evaluation
        # after that.
        load_ended = time.time()
        scraped: list[float] = []

        def fresh() -> bool:
            last = prom.scraped_after(load_ended)
            scraped[:] = [] if last is None else [last]
            return last is not None

        assert wait_until(fresh, timeout=120)
        assert wait_until(lambda: prom.evaluated_after(scraped[0]), timeout=60)
        yield prom, gateways
    finally:
        if proc is not None:
            proc.stop()
        for gateway in gateways.values():
            gateway.process.stop()
        redis.stop()


async def drive_load(engine: Engine, gateways: dict[str, Gateway], key: str) -> None:
    async with httpx.AsyncClient(timeout=120) as http:
        await live_load.outcomes_and_refusals(http, gateways)
        await live_load.queue_with_every_priority(http, gateways["admission"].url)
        await live_fleet.tenant_at_its_limit(gateways["keyed"], key)
        await live_fleet.prefix_routing(gateways["fleet"])
        await live_load.engine_phases(http, engine, gateways["direct"].url)
    serving = [g for name, g in gateways.items() if name != "no-engine"]
    await live_fleet.engine_stall(engine, gateways["failover"], serving)
    await live_load.drain(gateways["direct"])


def test_the_load_made_every_label_value_the_panels_break_out(
    prometheus: tuple[Prometheus, dict[str, Gateway]],
) -> None:
    """The gateways' counters are since they started, at this test; a child
    made at its first count has no sample before it, so its total over the
    run is read (``max_over_time``: the drained gateway is gone by now)."""
    prom, _ = prometheus
    window = RUN
    assert prom.label_values(
        f"sum by (outcome) (max_over_time(gateway_requests_total{window}))", "outcome"
    ) == {"completed", "rejected", "cancelled", "failed"}
    assert prom.label_values(
        f"sum by (reason) (max_over_time(gateway_rejections_total{window}))", "reason"
    ) == {
        "invalid",
        "too_large",
        "body_timeout",
        "engine_invalid",
        "unauthorized",
        "forbidden",
        "rate_limited",
        "queue_full",
        "objective_expired",
        "unavailable",
        "overloaded",
        "draining",
    }
    assert prom.label_values(
        f"sum by (phase) (max_over_time(gateway_cancellations_total{window}))", "phase"
    ) == {"receiving", "queued", "waiting_first_token", "streaming", "non_streaming"}
    assert prom.label_values(
        f"max by (priority) (max_over_time(gateway_queue_depth{window}))", "priority"
    ) == {"high", "normal", "low"}
    assert prom.label_values(
        f"sum by (finished_reason) (increase(vllm:request_success_total{window}))",
        "finished_reason",
    ) >= {"stop", "length"}
    assert prom.query(f"sum(increase(vllm:num_preemptions_total{window})) > 0")


def test_the_fleet_and_the_keys_made_their_series(
    prometheus: tuple[Prometheus, dict[str, Gateway]], engine: Engine
) -> None:
    """Counted since these gateways started. These children are made at their
    first count, so a rate over them misses it: the totals are read instead."""
    prom, gateways = prometheus
    fleet = f'instance="{gateways["fleet"].url.removeprefix("http://")}"'
    failover = f'instance="{gateways["failover"].url.removeprefix("http://")}"'
    names = {name.removeprefix("http://") for name in live_fleet.engine_names(engine)}
    assert prom.label_values(f"gateway_engine_requests_total{{{fleet}}}", "engine") == names
    assert prom.query(f"sum(gateway_routing_affinity_hits_total{{{fleet}}}) > 0")
    assert prom.query(f"sum(gateway_routing_load_cap_overrides_total{{{fleet}}}) > 0")
    assert prom.labels(f"gateway_fleet_kv_tokens_reserved{{{fleet}}}", "engine") == names
    assert prom.query(f"gateway_shared_state_up{{{fleet}}} == 1")
    assert prom.label_values(f"gateway_engine_ejections_total{{{failover}}}", "engine") == names
    assert prom.query(f"sum(gateway_engine_retries_total{{{failover}}}) == 1")
    # Keyed tenants only: a request without a valid key makes no tenant series.
    tenant = live_fleet.TENANT
    assert prom.label_values("gateway_tenant_tokens_total", "tenant") == {tenant}
    assert prom.label_values("gateway_tenant_tokens_total", "kind") == {"admitted", "used"}
    assert prom.label_values("gateway_tenant_rejections_total", "reason") == {
        "forbidden",
        "rate_limited",
    }


def test_only_the_replica_with_redis_reports_shared_state_and_nothing_alerts(
    prometheus: tuple[Prometheus, dict[str, Gateway]],
) -> None:
    """Six gateways here have no Redis: they have no shared state to be down."""
    prom, gateways = prometheus
    fleet = gateways["fleet"].url.removeprefix("http://")
    assert prom.labels("gateway_shared_state_up", "instance") == {fleet}
    assert not prom.query('ALERTS{alertname="GatewaySharedStateDown"}')


@pytest.mark.parametrize("name", sorted(build.DASHBOARDS))
def test_every_panel_query_returns_series(
    prometheus: tuple[Prometheus, dict[str, Gateway]], name: str
) -> None:
    prom, _ = prometheus
    failures = []
    for title, expr in queries(load(name)):
        concrete = expr
        for variable, value in VARIABLES.items():
            concrete = concrete.replace(variable, value)
        if not prom.query(concrete):
            failures.append(f"{title}: {concrete}")
    assert not failures, "queries without series:\n" + "\n".join(failures)


def test_the_latency_panels_show_traced_requests_as_exemplars(
    prometheus: tuple[Prometheus, dict[str, Gateway]], trace_backend: TraceBackend
) -> None:
    """The panels' exemplar queries (time to first token, request duration)
    return exemplars from the traced gateways, each a trace the backend holds."""
    prom, _ = prometheus
    end = time.time()
    targets = [
        target
        for panel in load("gateway.json")["panels"]
        for target in panel.get("targets") or []
        if target.get("exemplar")
    ]
    assert len(targets) == 2
    for target in targets:
        expr = target["expr"]
        for variable, value in VARIABLES.items():
            expr = expr.replace(variable, value)
        found = prom.exemplars(expr, end - 3600, end)
        trace_ids = sorted(
            {e["labels"]["trace_id"] for series in found for e in series["exemplars"]}
        )
        assert trace_ids, f"no exemplar for {expr}"
        # The exemplars' traces are in the backend, a gateway's server span in
        # each (one drained gateway may have been stopped before it sent its
        # last spans: one found of ten asked is enough).
        held = [
            trace_id
            for trace_id in trace_ids[:10]
            if any(span["name"].startswith("POST /v1/") for span in trace_backend.spans(trace_id))
        ]
        assert held, f"none of {trace_ids[:10]} is a trace the backend holds"


def test_a_snapshot_draws_every_panel(
    prometheus: tuple[Prometheus, dict[str, Gateway]], tmp_path: Path
) -> None:
    prom, _ = prometheus
    end = time.time()
    out = tmp_path / "degradation.png"
    dashboard = load("degradation.json")
    drawn = snapshot.render(dashboard, prom.url, end - 300, end, out)
    assert len(drawn) == sum(1 for panel in dashboard["panels"] if panel.get("targets"))
    assert all(count > 0 for count in drawn.values()), drawn
    assert out.stat().st_size > 20_000


def test_prometheus_scraped_the_project_rules(
    prometheus: tuple[Prometheus, dict[str, Gateway]],
) -> None:
    prom, _ = prometheus
    rules = httpx.get(f"{prom.url}/api/v1/rules", timeout=10).json()["data"]["groups"]
    assert {group["name"] for group in rules} >= {
        "gateway-latency",
        "engine-latency",
        "vllm-gateway",
    }
