"""Every dashboard query, run by a real Prometheus against a real stack.

Prometheus runs with the project's local config (targets filled in for this
run) and rules. Load through three gateways makes every label value a panel
breaks out: each outcome, each rejection reason, each cancellation phase, each
queue priority, engine preemptions. Then every panel query of every dashboard
goes through Prometheus' HTTP API and must return series.
"""

import asyncio
import random
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from dashboards import build, snapshot
from deploy.local import ROOT, ManagedProcess, free_port
from tests.conftest import ENGINE_MAX_NUM_SEQS, MODEL, Engine, Gateway, launch_gateway, wait_until
from tests.observability.test_dashboards import load, queries
from tests.support.raw_http import close, connect, request_bytes
from tests.support.streams import hold_streams, leave_after, open_stream, read_content_chunks

LONG = {"model": MODEL, "max_tokens": 1500, "ignore_eos": True}
RATE_INTERVAL = "1m"


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str) -> list[dict[str, Any]]:
        reply = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=30)
        body = reply.json()
        assert body["status"] == "success", f"{expr}: {body}"
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def label_values(self, expr: str, label: str) -> set[str]:
        return {s["metric"][label] for s in self.query(expr) if float(s["value"][1]) > 0}


def prometheus_config(engine: str, gateways: list[str]) -> str:
    config = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.local.yml").read_text())
    config["global"]["scrape_interval"] = "1s"
    config["global"]["evaluation_interval"] = "1s"
    config["rule_files"] = [str(ROOT / "deploy/prometheus/rules/*.yml")]
    targets = {"gateway": gateways, "vllm": [engine]}
    for job in config["scrape_configs"]:
        job["static_configs"] = [{"targets": targets[job["job_name"]]}]
    return yaml.safe_dump(config)


@pytest.fixture(scope="module")
def prometheus(
    engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Prometheus, dict[str, Gateway]]]:
    binary = shutil.which("prometheus")
    assert binary, "prometheus is missing: install Debian's prometheus package (.ci/run does)"
    logs = tmp_path_factory.mktemp("observability")
    gateways = {
        # Admission on with a tiny queue: queue_full, queue_timeout, queued cancels.
        "admission": launch_gateway(
            logs, engine.url, {"max_concurrency": 2, "queue_max_depth": 4, "queue_timeout": 1.5}
        ),
        # Admission off: engine-side waiting, preemptions, cancels in every engine phase.
        "direct": launch_gateway(logs, engine.url, {"admission": "off", "drain_grace_seconds": 20}),
        # An engine that is not there: unavailable.
        "no-engine": launch_gateway(logs, f"http://127.0.0.1:{free_port()}", {}),
        # A non-streaming limit shorter than any long answer: failed (504).
        "impatient": launch_gateway(logs, engine.url, {"upstream_non_stream_timeout": 0.1}),
    }
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
        ],
        {},
        logs,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        proc.wait_http(f"{url}/-/ready", timeout=60)
        prom = Prometheus(url)
        assert wait_until(lambda: len(prom.query("up == 1")) == 5, timeout=60)
        asyncio.run(drive_load(engine, gateways))
        # Two more scrapes and rule evaluations after the last event.
        time.sleep(4)
        yield prom, gateways
    finally:
        proc.stop()
        for gateway in gateways.values():
            gateway.process.stop()


async def abandon_upload(url: str) -> None:
    head, body = request_bytes("/v1/completions", {"model": MODEL, "prompt": "x" * 100})
    _, writer = await connect(url)
    writer.write(head + body[:10])
    await writer.drain()
    await close(writer)


async def drive_load(engine: Engine, gateways: dict[str, Gateway]) -> None:
    admission, direct, nowhere, impatient = (
        gateways[k].url for k in ("admission", "direct", "no-engine", "impatient")
    )
    async with httpx.AsyncClient(timeout=120) as http:
        # Completed, with both finish reasons (natural EOS and max_tokens).
        for url in (admission, direct):
            for i in range(6):
                await http.post(
                    f"{url}/v1/completions",
                    json={"model": MODEL, "prompt": f"Story {i}", "max_tokens": 200},
                )
                await http.post(
                    f"{url}/v1/completions", json={**LONG, "prompt": f"Fixed {i}", "max_tokens": 20}
                )
        # Failed (the engine takes longer than the gateway allows); refused by
        # the engine, invalid, too large, unavailable; a client that leaves
        # while its body is still arriving.
        timed_out = await http.post(f"{impatient}/v1/completions", json={**LONG, "prompt": "x"})
        assert timed_out.status_code == 504
        await http.post(
            f"{admission}/v1/completions", json={"model": MODEL, "prompt": "x", "temperature": -3}
        )
        await http.post(f"{admission}/v1/completions", content=b"{not json")
        await http.post(f"{admission}/v1/completions", content=b"x" * (5 * 1024 * 1024))
        await http.post(f"{nowhere}/v1/completions", json={"model": MODEL, "prompt": "x"})
        await abandon_upload(admission)

        # The admission gateway's two slots taken: its queue fills with every
        # priority; one client leaves while queued, the others time out, and
        # one more finds the queue full.
        blockers = await hold_streams(http, admission, LONG, 2)
        try:
            waiting = [
                asyncio.create_task(
                    http.post(
                        f"{admission}/v1/completions",
                        json={**LONG, "prompt": p},
                        headers={"X-Priority": p},
                    )
                )
                for p in ("high", "normal", "low")
            ]
            leaving = asyncio.create_task(
                leave_after(admission, {**LONG, "prompt": "impatient"}, 0.5)
            )
            await asyncio.sleep(0.3)
            full = await http.post(
                f"{admission}/v1/completions", json={**LONG, "prompt": "one too many"}
            )
            assert full.status_code == 429
            await leaving
            for task in waiting:
                assert (await task).status_code == 429
        finally:
            for blocker in blockers:
                await blocker.aclose()

        # Through the gateway without admission: cancel mid-stream and during
        # a non-streaming call.
        direct_http = httpx.AsyncClient(base_url=direct, timeout=120)
        async with direct_http:
            async with open_stream(direct_http, {**LONG, "prompt": "Leave mid-stream"}) as response:
                await read_content_chunks(response, 3)
            await leave_after(direct, {**LONG, "prompt": "Leave non-streaming"}, 0.3)

            # Saturate the engine (preemptions, a waiting queue) and leave one
            # request before its first token.
            saturating = await hold_streams(
                http, engine.url, {**LONG, "prompt": str(random.random())}, ENGINE_MAX_NUM_SEQS
            )
            preempted = engine.metric("vllm:num_preemptions_total")
            try:
                async with open_stream(
                    direct_http, {**LONG, "prompt": "Leave before first token"}
                ) as _:
                    await asyncio.sleep(0.5)
                # Let the blockers outgrow the KV cache and preempt each other.
                assert await asyncio.to_thread(
                    wait_until, lambda: engine.metric("vllm:num_preemptions_total") > preempted, 600
                )
            finally:
                for blocker in saturating:
                    await blocker.aclose()

            # Draining: a stream in flight keeps the gateway draining while a
            # new request is turned away.
            async with open_stream(direct_http, {**LONG, "prompt": "Last one"}) as response:
                chunks = response.aiter_raw()
                assert await anext(chunks)
                gateways["direct"].process.signal(signal.SIGTERM)
                await asyncio.sleep(0.5)
                refused = await direct_http.post("/v1/completions", json={**LONG, "prompt": "late"})
                assert refused.status_code == 503
                async for _ in chunks:
                    pass


def test_the_load_made_every_label_value_the_panels_break_out(
    prometheus: tuple[Prometheus, dict[str, Gateway]],
) -> None:
    prom, _ = prometheus
    window = "[5m]"
    assert prom.label_values(
        f"sum by (outcome) (increase(gateway_requests_total{window}))", "outcome"
    ) == {"completed", "rejected", "cancelled", "failed"}
    assert prom.label_values(
        f"sum by (reason) (increase(gateway_rejections_total{window}))", "reason"
    ) == {
        "invalid",
        "too_large",
        "queue_full",
        "queue_timeout",
        "unavailable",
        "draining",
        "engine_invalid",
    }
    assert prom.label_values(
        f"sum by (phase) (increase(gateway_cancellations_total{window}))", "phase"
    ) == {"receiving", "queued", "waiting_first_token", "streaming", "non_streaming"}
    assert prom.label_values(
        f"max by (priority) (max_over_time(gateway_queue_depth{window}))", "priority"
    ) == {"high", "normal", "low"}
    assert prom.label_values(
        f"sum by (finished_reason) (increase(vllm:request_success_total{window}))",
        "finished_reason",
    ) >= {"stop", "length"}
    assert prom.query(f"sum(increase(vllm:num_preemptions_total{window})) > 0")


@pytest.mark.parametrize("name", sorted(build.DASHBOARDS))
def test_every_panel_query_returns_series(
    prometheus: tuple[Prometheus, dict[str, Gateway]], name: str
) -> None:
    prom, _ = prometheus
    failures = []
    for title, expr in queries(load(name)):
        concrete = expr.replace("$__rate_interval", RATE_INTERVAL).replace("$model", ".*")
        if not prom.query(concrete):
            failures.append(f"{title}: {concrete}")
    assert not failures, "queries without series:\n" + "\n".join(failures)


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
