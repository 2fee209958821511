"""``make up``'s runner: the whole local stack starts, serves, and stops clean
(here with two gateway replicas sharing Redis, ``GATEWAYS=2``, and the trace
backend, which ``make test`` installs)."""

import json
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil

from deploy.local import ManagedProcess, free_port, free_port_with, metric
from deploy.stack import KV_EVENTS_OFFSET, TRACE_BACKEND
from tests.support.trace_backend import TraceStore


def test_the_stack_streams_and_leaves_no_process_behind(tmp_path: Path) -> None:
    assert TRACE_BACKEND.exists(), "the trace backend is missing: make trace-backend"
    settings = (
        "ENGINE_PORT",
        "GATEWAY_PORT",
        "PROMETHEUS_PORT",
        "REDIS_PORT",
        "TRACES_PORT",
        "TRACES_GRPC_PORT",
    )
    ports = {name: free_port() for name in settings}
    # The ports the stack derives from these are free too: the second
    # gateway's (+10), the engine's KV events and their replay (+5, +6),
    # the second admin listener (+1).
    ports["GATEWAY_PORT"] = free_port_with(10)
    ports["ENGINE_PORT"] = free_port_with(KV_EVENTS_OFFSET, KV_EVENTS_OFFSET + 1)
    admin = free_port_with(1)
    env = {
        **{name: str(port) for name, port in ports.items()},
        "ADMIN_PORT": str(admin),
        "ENGINE_KV_BLOCKS": "24",
        "GATEWAYS": "2",
        "TRACES_DIR": str(tmp_path / "traces"),
    }
    trace_id = secrets.token_hex(16)
    stack = ManagedProcess("stack", [sys.executable, "deploy/stack.py"], env, tmp_path)
    gateway = f"http://127.0.0.1:{ports['GATEWAY_PORT']}"
    second = f"http://127.0.0.1:{ports['GATEWAY_PORT'] + 10}"
    try:
        stack.wait_http(f"{gateway}/health/ready", timeout=900)
        stack.wait_http(f"{second}/health/ready", timeout=120)
        # Metrics on the admin listeners only; the replicas share Redis.
        assert httpx.get(f"{gateway}/metrics", timeout=10).status_code == 404
        assert metric(f"http://127.0.0.1:{admin + 1}", "gateway_shared_state_up") == 1

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
                "-H",
                f"traceparent: 00-{trace_id}-{'1' * 16}-01",
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
        # The stack's gateways and engine trace into its trace backend.
        traces = TraceStore(f"http://127.0.0.1:{ports['TRACES_PORT']}")
        spans = traces.wait_for_trace(trace_id, {"POST /v1/chat/completions", "llm_request"})
        assert len(spans) >= 4, [span["name"] for span in spans]

        tree = psutil.Process(stack.pid).children(recursive=True)
        names = " ".join(" ".join(p.cmdline()) for p in tree)
        assert "vllm.entrypoints.openai.api_server" in names
        assert names.count("-m app") == 2
        assert "redis-server" in names
        assert "phoenix serve" in names
        assert any(p.name().startswith("VLLM::EngineCor") for p in tree), "no engine core seen"
        # The gateways keep off the engine's cores (where it leaves any).
        engine = next(p for p in tree if "vllm.entrypoints" in " ".join(p.cmdline()))
        if len(os.sched_getaffinity(0)) >= 2:
            for gateway in (p for p in tree if "-m app" in " ".join(p.cmdline())):
                assert not set(gateway.cpu_affinity()) & set(engine.cpu_affinity())

        stack.signal(signal.SIGTERM)
        # Stopped by the signal, as honcho reports it: 128 + SIGTERM. A
        # process of the stack that ended on its own first, or a runner that
        # failed, exits with another code.
        assert stack.proc.wait(timeout=60) == 128 + signal.SIGTERM
        _, alive = psutil.wait_procs(tree, timeout=30)
        assert alive == [], f"survivors: {[(p.pid, p.name()) for p in alive]}"
    finally:
        stack.stop()
