"""``make up``: the local stack in the foreground.

The engine (vLLM on the CPU with the tiny model), the gateway once the engine
answers, and Prometheus when its binary is installed. honcho runs them, each
in its own process group; Ctrl-C or SIGTERM stops all of them, and anything
still running a few seconds later is killed with its whole group (vLLM's
engine core included).

Ports come from ENGINE_PORT (8001), GATEWAY_PORT (8000) and PROMETHEUS_PORT
(9090); engine size from ENGINE_KV_BLOCKS, ENGINE_MAX_NUM_SEQS and
ENGINE_MODEL_NAME.
"""

import os
import shlex
import shutil
import sys
from pathlib import Path

from honcho.manager import Manager

ROOT = Path(__file__).resolve().parent.parent
PROMETHEUS_TEMPLATE = ROOT / "deploy" / "prometheus" / "prometheus.local.yml"


def prometheus_config(engine_port: str, gateway_port: str, rules_dir: Path) -> str:
    """The local scrape config with this run's ports filled in."""
    text = PROMETHEUS_TEMPLATE.read_text()
    text = text.replace("127.0.0.1:8001", f"127.0.0.1:{engine_port}")
    text = text.replace("127.0.0.1:8000", f"127.0.0.1:{gateway_port}")
    return text.replace("rules/", f"{rules_dir}/")


def main() -> int:
    env = dict(os.environ)
    engine_port = env.setdefault("ENGINE_PORT", "8001")
    gateway_port = env.setdefault("GATEWAY_PORT", "8000")
    prometheus_port = env.get("PROMETHEUS_PORT", "9090")
    env.setdefault("GATEWAY_UPSTREAM_URL", f"http://127.0.0.1:{engine_port}")
    # honcho gives the gateway about 5 s after SIGTERM before it kills it.
    env.setdefault("GATEWAY_DRAIN_GRACE_SECONDS", "3")
    python = shlex.quote(sys.executable)

    manager = Manager()
    manager.add_process("engine", "exec deploy/engine/run-cpu.sh", env=env, cwd=str(ROOT))
    manager.add_process(
        "gateway",
        f"{python} deploy/wait_for_http.py http://127.0.0.1:{engine_port}/health --timeout 900"
        f" && exec {python} -m app",
        env=env,
        cwd=str(ROOT),
    )

    prometheus = shutil.which("prometheus")
    if prometheus:
        data = ROOT / ".cache" / f"prometheus-{prometheus_port}"
        data.mkdir(parents=True, exist_ok=True)
        config = data / "prometheus.yml"
        config.write_text(
            prometheus_config(engine_port, gateway_port, ROOT / "deploy" / "prometheus" / "rules")
        )
        manager.add_process(
            "prometheus",
            f"exec {shlex.quote(prometheus)} --config.file={shlex.quote(str(config))}"
            f" --storage.tsdb.path={shlex.quote(str(data / 'data'))}"
            f" --web.listen-address=127.0.0.1:{prometheus_port}",
            env=env,
            cwd=str(ROOT),
        )
    else:
        print(
            "prometheus not found: the stack runs without it. Install it to keep metrics"
            " history on :9090 (Debian/Ubuntu: apt-get install prometheus).",
            flush=True,
        )

    print(
        f"engine  http://127.0.0.1:{engine_port}  (ready in about a minute)\n"
        f"gateway http://127.0.0.1:{gateway_port}  (starts once the engine answers)",
        flush=True,
    )
    manager.loop()
    return manager.returncode or 0


if __name__ == "__main__":
    sys.exit(main())
