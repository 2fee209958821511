"""``make load``: run a locust shape headless against the running stack, then
write a report.

    .venv/bin/python -m loadtests.run --shape degradation --target gateway

Writes ``reports/<timestamp>-<shape>-<target>/``: locust's CSVs and HTML
report, per-request records, the engine's (and gateway's) metrics sampled
every second, the Prometheus range data of the run window when Prometheus is
reachable (plus a snapshot of the Degradation dashboard), and the report
(``summary.md``, ``summary.json``, ``steps.csv``, PNG plots per step).

``--direct-priority``: straight at vLLM, the class users put their class's
priority in the body (the engine must run ``--scheduling-policy priority``,
as the project's do); through the gateway they never do, the gateway sets it.
``--no-live-page``: no browser beside the run (runs compared with each other
should carry the same load besides their own).

Locust runs as a subprocess: importing it would patch this process with gevent.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import httpx

from loadtests.live_page import LivePageWatcher
from loadtests.report import write_report
from loadtests.sampler import Sampler
from loadtests.schedule import DEFAULT_USERS, SHAPES, schedule

ROOT = Path(__file__).resolve().parents[1]
MAKE_UP_ADMIN = "http://127.0.0.1:9100"
EXPORTED = {
    "engine_running": "sum(vllm:num_requests_running)",
    "engine_waiting": "sum(vllm:num_requests_waiting)",
    "kv_usage": "max(vllm:kv_cache_usage_perc)",
    "preemptions": "sum(vllm:num_preemptions_total)",
    "generation_tokens_per_s": "sum(rate(vllm:generation_tokens_total[15s]))",
    "gateway_queue": "sum(gateway_queue_depth)",
    "gateway_in_flight": "sum(gateway_requests_in_flight)",
    "gateway_rejections": "sum by (reason) (gateway_rejections_total)",
    "gateway_ttft_p99": 'job:gateway_time_to_first_token_seconds:quantile_1m{quantile="0.99"}',
}


def export_prometheus(prometheus: str, start: float, end: float, run: Path) -> bool:
    """Save the run window's range data; False if Prometheus is not there."""
    try:
        httpx.get(f"{prometheus}/-/ready", timeout=3).raise_for_status()
    except httpx.HTTPError:
        return False
    from dashboards import snapshot

    data = {
        name: snapshot.range_query(prometheus, expr, start, end, 2.0)
        for name, expr in EXPORTED.items()
    }
    (run / "prometheus.json").write_text(json.dumps(data) + "\n")
    dashboard = json.loads((ROOT / "dashboards" / "degradation.json").read_text())
    snapshot.render(dashboard, prometheus, start, end, run / "dashboard-degradation.png")
    return True


def metrics_url(gateway_url: str) -> str:
    """Where a gateway not told otherwise serves ``/metrics``: on its own
    port, or (``make up``'s gateway, with its admin listener) on 9100."""
    try:
        if httpx.get(f"{gateway_url}/metrics", timeout=5).status_code == 200:
            return gateway_url
    except httpx.HTTPError:
        pass
    return MAKE_UP_ADMIN


def live_page_watcher(args: argparse.Namespace, run: Path) -> LivePageWatcher | None:
    """The gateway's live page watched for the run, where its admin port
    serves one; its screenshot taken just before the shape's last stage ends."""
    if not args.gateway_metrics_url:
        return None
    why_not = LivePageWatcher.available()
    try:
        served = httpx.get(f"{args.gateway_metrics_url}/live", timeout=5).status_code == 200
    except httpx.HTTPError:
        served = False
    if why_not or not served:
        print(f"live page: no screenshot ({why_not or 'the admin port serves no /live'})")
        return None
    at = max(stage.end for stage in schedule(args.shape)) - 5
    watcher = LivePageWatcher(args.gateway_metrics_url, at, run / "live-page.png")
    watcher.start()
    return watcher


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=SHAPES, default="degradation")
    parser.add_argument("--target", choices=("gateway", "direct"), default="gateway")
    parser.add_argument(
        "--gateway-url", default=os.environ.get("LOAD_GATEWAY_URL", "http://127.0.0.1:8000")
    )
    parser.add_argument(
        "--gateway-metrics-url",
        default=os.environ.get("LOAD_GATEWAY_METRICS_URL"),
        help="where the gateway serves /metrics (its admin listener when"
        " GATEWAY_ADMIN_PORT is set; default: --gateway-url, or make up's admin"
        f" port {MAKE_UP_ADMIN} where the gateway serves no /metrics)",
    )
    parser.add_argument(
        "--engine-url", default=os.environ.get("ENGINE_URL", "http://127.0.0.1:8001")
    )
    parser.add_argument(
        "--prometheus", default=os.environ.get("PROMETHEUS_URL", "http://127.0.0.1:9090")
    )
    parser.add_argument("--out", type=Path, default=ROOT / "reports")
    parser.add_argument(
        "--direct-priority",
        action="store_true",
        help="straight at vLLM, the class users send their class's priority in the body",
    )
    parser.add_argument(
        "--no-live-page", action="store_true", help="no screenshot of the gateway's live page"
    )
    args = parser.parse_args()

    url = args.gateway_url if args.target == "gateway" else args.engine_url
    if args.target == "gateway" and not args.gateway_metrics_url:
        args.gateway_metrics_url = metrics_url(args.gateway_url)
    try:
        httpx.get(f"{url}/v1/models", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        print(f"{url} is not serving ({exc!r}); start the stack with `make up`", file=sys.stderr)
        return 2

    stamp = time.strftime("%Y%m%d-%H%M%S")
    run = args.out / f"{stamp}-{args.shape}-{args.target}"
    run.mkdir(parents=True)
    users = os.environ.get("LOAD_USER_CLASSES", DEFAULT_USERS[args.shape]).split(",")
    env = {**os.environ, "LOAD_SHAPE": args.shape, "LOAD_RECORDS": str(run / "records.jsonl")}
    body_priority = args.direct_priority and args.target == "direct"
    env["LOAD_BODY_PRIORITY"] = "1" if body_priority else "0"
    command = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(ROOT / "loadtests" / "locustfile.py"),
        "--headless",
        "--only-summary",
        "--host",
        url,
        "--csv",
        str(run / "locust"),
        "--csv-full-history",
        "--html",
        str(run / "locust.html"),
        # When the shape ends, requests in flight finish and are recorded:
        # past the knee, a step's requests may all still be running then.
        "--stop-timeout",
        "120",
        *users,
    ]
    started = time.time()
    meta = {
        "shape": args.shape,
        "target": args.target,
        "url": url,
        "started": started,
        "started_iso": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)),
        "stages": [asdict(stage) for stage in schedule(args.shape)],
        "users": users,
        "body_priority": body_priority,
        "command": f"python -m loadtests.run --shape {args.shape} --target {args.target}"
        + (" --direct-priority" if args.direct_priority else ""),
        "env": {
            k: v for k, v in os.environ.items() if k.startswith(("LOAD_", "ENGINE_", "GATEWAY_"))
        },
    }
    (run / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")

    sampler = Sampler(
        args.engine_url,
        (args.gateway_metrics_url or args.gateway_url) if args.target == "gateway" else None,
        run / "samples.jsonl",
    )
    sampler.start()
    watched = args.target == "gateway" and not args.no_live_page
    watcher = live_page_watcher(args, run) if watched else None
    with (run / "locust.log").open("wb") as log:
        code = subprocess.run(
            command, env=env, cwd=run, stdout=log, stderr=subprocess.STDOUT, check=False
        ).returncode
    sampler.stop()
    if watcher is not None:
        watcher.stop()
        watcher.join(timeout=60)
        print(watcher.note)
    ended = time.time()

    if export_prometheus(args.prometheus, started, ended, run):
        print(f"Prometheus range data saved ({args.prometheus})")
    else:
        print(f"no Prometheus at {args.prometheus}: the report uses the sampled metrics only")
    write_report(run)
    print((run / "summary.md").read_text())
    print(f"report: {run}")
    # Locust exits 1 when any request failed; refusals are data, not an error.
    return 0 if code in (0, 1) else code


if __name__ == "__main__":
    sys.exit(main())
