"""``make up``: the local stack in the foreground.

The engines (vLLM on the CPU with the tiny model), the gateways once an engine
answers, Redis when there are several gateways, and Prometheus when its
binary is installed. honcho runs them, each in its own process group; Ctrl-C
or SIGTERM stops all of them, and anything still running once the gateways'
shutdown timeout has passed is killed with its whole group (vLLM's engine
core included).

``ENGINE_REPLICAS`` engines listen on ``ENGINE_PORT`` + 10·i (8001, 8011, …),
``GATEWAYS`` gateways on ``GATEWAY_PORT`` + 10·i (8000, 8010, …), each
with its admin listener (``/metrics``, ``/status``, the live page ``/live``)
on ``ADMIN_PORT`` + i (9100 + i); Redis on ``REDIS_PORT`` (6379).
Prometheus on ``PROMETHEUS_PORT`` (9090).
The trace backend (``deploy/traces/run.sh``) when ``make trace-backend`` has
installed it, unless ``TRACES=off``: its UI and OTLP/HTTP on ``TRACES_PORT``
(6006), OTLP/gRPC on ``TRACES_GRPC_PORT`` (4317); the gateways and the
engines then export their traces to it.
Each engine publishes its KV cache events on its port + 5, replayed on + 6
(8006 and 8007 beside 8001), and the gateways subscribe to them.
Engine size from ENGINE_KV_BLOCKS, ENGINE_MAX_NUM_SEQS and ENGINE_MODEL_NAME.
On a small machine every engine shares the engine cores (``ENGINE_CPUS``):
the last core stays for the gateways and their clients, and the gateways
are pinned to the cores the engines leave (``gateway_cpus``).

With ``ENGINE_SCALE_FROM_ZERO=<seconds>``, no engine runs until a request
comes: each engine is run by a scaler (``deploy/scaler.py``) that starts it
when the gateways hold a request for it and stops it after that many idle
seconds; the gateways start at once, knowing the engines' model while none
is up (``GATEWAY_COLD_MODELS``), and hold requests for it up to
``GATEWAY_COLD_START_TIMEOUT`` (300 s unless the caller sets it).

Every ``GATEWAY_*`` variable of the caller reaches every gateway as it is
(``make up GATEWAY_QUEUE_TIMEOUT=5``); the stack itself sets only what it
owns (ports, the engines, Redis) and, unless the caller does, the gateways'
sequence cap to the engine's and where the engines' KV cache events are.
"""

import os
import shlex
import shutil
import sys
from pathlib import Path

import honcho.manager
import yaml
from honcho.manager import Manager

from app.observe.tracing import tracing_wanted
from app.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
TRACE_BACKEND = ROOT / ".venv-traces" / "bin" / "phoenix"
PROMETHEUS_TEMPLATE = ROOT / "deploy" / "prometheus" / "prometheus.local.yml"
ADMIN_PORT = 9100
# vLLM's --max-num-seqs on the CPU when ENGINE_MAX_NUM_SEQS leaves it unset.
CPU_ENGINE_MAX_NUM_SEQS = 128
# Each engine's KV cache events, and their replay, beside its HTTP port.
KV_EVENTS_OFFSET = 5
# After the gateways' shutdown timeout, how long honcho still waits before it
# kills what is left.
KILL_MARGIN_SECONDS = 5.0


def prometheus_config(engines: list[str], gateways: list[str], rules_dir: Path) -> str:
    """The local scrape config with this run's targets filled in."""
    config = yaml.safe_load(PROMETHEUS_TEMPLATE.read_text())
    targets = {"gateway": gateways, "vllm": engines}
    for job in config["scrape_configs"]:
        job["static_configs"] = [{"targets": targets[job["job_name"]]}]
    config["rule_files"] = [f"{rules_dir}/*.yml"]
    dumped: str = yaml.safe_dump(config, sort_keys=False)
    return dumped


def parse_cpus(spec: str) -> set[int]:
    """A CPU list as taskset takes it ("0", "0-2", "0,3-4")."""
    cpus: set[int] = set()
    for part in spec.split(","):
        first, _, last = part.strip().partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def gateway_cpus(env: dict[str, str], available: set[int]) -> str | None:
    """The cores the gateways are pinned to: those of ``available`` the
    engine launcher leaves (deploy/engine/run-cpu.sh pins the engines to
    ``ENGINE_CPUS``, by default all cores but the last). The engine runs
    below the gateways' priority (``ENGINE_NICE``), so a gateway the
    scheduler moves onto an engine core takes most of it while it runs:
    measured under overload on 2 cores, the gateway and its clients took
    2-4% of the engine's core, 10% while a burst was taken in. None where
    the launcher leaves no core (one core, or ``ENGINE_CPUS`` naming them
    all): the gateways then go where the scheduler puts them."""
    spec = env.get("ENGINE_CPUS") or ""
    if not spec and len(available) >= 2:
        spec = f"0-{len(available) - 2}"
    if not spec:
        return None
    rest = sorted(available - parse_cpus(spec))
    return ",".join(map(str, rest)) or None


def gateway_environment(env: dict[str, str], engine_urls: list[str]) -> dict[str, str]:
    """What every local gateway runs with: the caller's environment, every
    ``GATEWAY_*`` in it as it is, the engines, and where the caller sets none,
    as many sequences at once as the engine runs (the settings' default, 256,
    is the GPU engine's; the CPU engine runs 128 unless told otherwise),
    prompts counted with the engines' own tokenizer files, which are on this
    host (no round trip to the engine per request), and the engines' KV cache
    events."""
    seqs = env.get("ENGINE_MAX_NUM_SEQS") or str(CPU_ENGINE_MAX_NUM_SEQS)
    model_dir = ROOT / env.get("ENGINE_MODEL_DIR", ".models/tiny")
    return {
        "GATEWAY_MAX_CONCURRENCY": seqs,
        "GATEWAY_TOKENIZER_DIR": str(model_dir),
        # The engines it starts order their queue by priority (run-cpu.sh).
        "GATEWAY_ENGINE_SCHEDULING": "priority",
        "GATEWAY_KV_EVENTS_ENDPOINT": f"tcp://{{host}}:{{port+{KV_EVENTS_OFFSET}}}",
        "GATEWAY_KV_EVENTS_REPLAY_ENDPOINT": f"tcp://{{host}}:{{port+{KV_EVENTS_OFFSET + 1}}}",
        **env,
        "GATEWAY_UPSTREAM_URLS": ",".join(engine_urls),
    }


def cold_start_environment(env: dict[str, str]) -> dict[str, str]:
    """What the gateways know of the engines' model while none is up (scale
    from zero), and how long they hold a request for it."""
    model = env.get("ENGINE_MODEL_NAME") or "tiny"
    length = env.get("ENGINE_MAX_MODEL_LEN") or "2048"
    return {"GATEWAY_COLD_MODELS": f"{model}={length}", "GATEWAY_COLD_START_TIMEOUT": "300"}


def trace_backend(manager: Manager, env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The local trace backend, when it is installed and the caller's own
    ``OTEL_*`` variables name no collector of theirs; what the gateways and
    what the engines then export with (both empty when traces are off)."""
    if env.get("TRACES", "").lower() == "off":
        return {}, {}
    if tracing_wanted(env):
        print("traces: the gateways export to the caller's OTEL_* endpoint", flush=True)
        return {}, {}
    if not TRACE_BACKEND.exists():
        print(
            "trace backend not installed: the stack runs without traces (`make trace-backend`"
            " installs one; then the UI is on :6006).",
            flush=True,
        )
        return {}, {}
    port, grpc_port = env.get("TRACES_PORT", "6006"), env.get("TRACES_GRPC_PORT", "4317")
    manager.add_process(
        "traces",
        "exec deploy/traces/run.sh",
        env={**env, "TRACES_PORT": port, "TRACES_GRPC_PORT": grpc_port},
        cwd=str(ROOT),
    )
    print(f"traces  http://127.0.0.1:{port}  (the trace backend's UI)", flush=True)
    return (
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{port}/v1/traces"},
        {"ENGINE_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{grpc_port}"},
    )


def kill_wait(settings: Settings) -> float:
    """How long honcho waits, once a process has stopped, before it kills
    the rest: until the gateways' shutdown timeout has passed (honcho's own
    5 s is shorter than any drain worth having)."""
    return settings.shutdown_timeout + KILL_MARGIN_SECONDS


def main() -> int:
    env = dict(os.environ)
    engine_port = int(env.setdefault("ENGINE_PORT", "8001"))
    gateway_port = int(env.setdefault("GATEWAY_PORT", "8000"))
    prometheus_port = env.get("PROMETHEUS_PORT", "9090")
    redis_port = env.get("REDIS_PORT", "6379")
    admin_port = int(env.get("ADMIN_PORT", str(ADMIN_PORT)))
    engines = int(env.get("ENGINE_REPLICAS", "1"))
    gateways = int(env.get("GATEWAYS", "1"))
    engine_urls = [f"http://127.0.0.1:{engine_port + 10 * i}" for i in range(engines)]
    # A module global honcho's loop reads.
    honcho.manager.KILL_WAIT = kill_wait(Settings())
    python = shlex.quote(sys.executable)
    manager = Manager()
    gateway_traces, engine_traces = trace_backend(manager, env)

    idle = env.get("ENGINE_SCALE_FROM_ZERO")
    scaled = (
        f"exec {python} -m deploy.scaler --idle {float(idle):g} "
        + " ".join(f"--metrics http://127.0.0.1:{admin_port + i}" for i in range(gateways))
        + " -- "
        if idle
        else "exec "
    )
    for i in range(engines):
        manager.add_process(
            f"engine-{i}" if engines > 1 else "engine",
            f"{scaled}deploy/engine/run-cpu.sh",
            env={
                **env,
                **engine_traces,
                "ENGINE_PORT": str(engine_port + 10 * i),
                "ENGINE_KV_EVENTS_PORT": str(engine_port + 10 * i + KV_EVENTS_OFFSET),
            },
            cwd=str(ROOT),
        )

    gateway_env = {**gateway_environment(env, engine_urls), **gateway_traces}
    if idle:
        gateway_env = {**cold_start_environment(env), **gateway_env}
    if gateways > 1:
        redis = shutil.which("redis-server")
        if redis is None:
            print("GATEWAYS > 1 needs redis-server (apt-get install redis-server)")
            return 2
        gateway_env["GATEWAY_REDIS_URL"] = f"redis://127.0.0.1:{redis_port}/0"
        manager.add_process(
            "redis",
            f"exec {shlex.quote(redis)} --port {redis_port} --bind 127.0.0.1 --save ''"
            " --appendonly no",
            env=env,
            cwd=str(ROOT),
        )
    scrape = []
    # Started once an engine answers; with scale from zero, at once.
    wait = (
        ""
        if idle
        else f"{python} deploy/wait_for_http.py {engine_urls[0]}/health --timeout 900 && "
    )
    cpus = gateway_cpus(env, os.sched_getaffinity(0))
    pin = f"taskset -c {cpus} " if cpus and shutil.which("taskset") else ""
    for i in range(gateways):
        listen = gateway_port + 10 * i
        # The admin listener: /metrics, /status and the live page, off the
        # API's port.
        settings = {"GATEWAY_PORT": str(listen), "GATEWAY_ADMIN_PORT": str(admin_port + i)}
        scrape.append(f"127.0.0.1:{admin_port + i}")
        manager.add_process(
            f"gateway-{i}" if gateways > 1 else "gateway",
            f"{wait}exec {pin}{python} -m app",
            env={**gateway_env, **settings},
            cwd=str(ROOT),
        )

    prometheus = shutil.which("prometheus")
    if prometheus:
        data = ROOT / ".cache" / f"prometheus-{prometheus_port}"
        data.mkdir(parents=True, exist_ok=True)
        config = data / "prometheus.yml"
        rules = ROOT / "deploy" / "prometheus" / "rules"
        config.write_text(
            prometheus_config([u.removeprefix("http://") for u in engine_urls], scrape, rules)
        )
        manager.add_process(
            "prometheus",
            f"exec {shlex.quote(prometheus)} --config.file={shlex.quote(str(config))}"
            f" --storage.tsdb.path={shlex.quote(str(data / 'data'))}"
            f" --web.listen-address=127.0.0.1:{prometheus_port}"
            " --enable-feature=exemplar-storage",
            env=env,
            cwd=str(ROOT),
        )
    else:
        print(
            "prometheus not found: the stack runs without it. Install it to keep metrics"
            " history on :9090 (Debian/Ubuntu: apt-get install --no-install-recommends"
            " prometheus; then systemctl disable --now prometheus, or PROMETHEUS_PORT).",
            flush=True,
        )

    for url in engine_urls:
        when = "on the first request" if idle else "ready in about a minute"
        print(f"engine  {url}  ({when})", flush=True)
    for i in range(gateways):
        print(f"gateway http://127.0.0.1:{gateway_port + 10 * i}  (starts once an engine answers)")
        print(f"live    http://127.0.0.1:{admin_port + i}/live  (its state, in a browser)")
    manager.loop()
    return manager.returncode or 0


if __name__ == "__main__":
    sys.exit(main())
