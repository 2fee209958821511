"""``make up``'s runner: the whole local stack starts, serves, and stops clean."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from deploy.local import ManagedProcess, free_port


def test_the_stack_streams_and_leaves_no_process_behind(tmp_path: Path) -> None:
    ports = {name: free_port() for name in ("ENGINE_PORT", "GATEWAY_PORT", "PROMETHEUS_PORT")}
    env = {
        **{name: str(port) for name, port in ports.items()},
        "ENGINE_KV_BLOCKS": "24",
    }
    stack = ManagedProcess("stack", [sys.executable, "deploy/stack.py"], env, tmp_path)
    gateway = f"http://127.0.0.1:{ports['GATEWAY_PORT']}"
    try:
        stack.wait_http(f"{gateway}/health/ready", timeout=900)

        body = {
            "model": "tiny",
            "messages": [{"role": "user", "content": "Hello"}],
            "max_tokens": 20,
            "ignore_eos": True,
            "stream": True,
        }
        curl = subprocess.run(
            [
                "curl",
                "-sN",
                f"{gateway}/v1/chat/completions",
                "-H",
                "content-type: application/json",
                "-d",
                json.dumps(body),
            ],
            capture_output=True,
            timeout=60,
            check=True,
        )
        events = [e for e in curl.stdout.split(b"\n\n") if e.startswith(b"data: {")]
        assert len(events) >= 20
        assert curl.stdout.endswith(b"data: [DONE]\n\n")

        tree = psutil.Process(stack.pid).children(recursive=True)
        names = " ".join(" ".join(p.cmdline()) for p in tree)
        assert "vllm.entrypoints.openai.api_server" in names
        assert "-m app" in names
        assert any(p.name().startswith("VLLM::EngineCor") for p in tree), "no engine core seen"

        stack.signal(signal.SIGTERM)
        assert stack.proc.wait(timeout=60) is not None
        _, alive = psutil.wait_procs(tree, timeout=30)
        assert alive == [], f"survivors: {[(p.pid, p.name()) for p in alive]}"
    finally:
        stack.stop()
