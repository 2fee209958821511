"""`docker compose stop` with a stream in flight: the gateway drains (the
stream completes, or ends with the SSE error event when the grace period runs
out) and exits 0. Stops the stack, so it runs last."""

import json
import subprocess
import threading
import time

import httpx
import pytest

from tests.containers import podman
from tests.containers.compose import ComposeProject

# The first test also waits for the stack to come up (see conftest.HEALTHY_WITHIN),
# the last one for it to go down.
pytestmark = pytest.mark.timeout(1800)

# Beyond the grace period: the server's own shutdown and the container stop.
MARGIN = 20.0


def final_event(body: bytes) -> str:
    events = [e for e in body.split(b"\n\n") if e.startswith(b"data: ")]
    assert events, "no SSE event"
    return events[-1][6:].decode()


@pytest.mark.last
def test_compose_stop_drains_the_gateway(stack: ComposeProject) -> None:
    gateway = stack.gateways()[0]
    grace = float(stack.services[gateway]["environment"].get("GATEWAY_DRAIN_GRACE_SECONDS", 20))
    port = stack.gateway_port(gateway)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as http:
        model = http.get("/v1/models").json()["data"][0]
        body = {
            "model": model["id"],
            "messages": [{"role": "user", "content": "Write a long story."}],
            "max_tokens": int(model.get("max_model_len", 2048)) - 64,
            "ignore_eos": True,
            "stream": True,
        }
        with http.stream("POST", "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            received = b""
            chunks = response.iter_raw()
            while b'"content":"' not in received:
                received += next(chunks)
            stopping: dict[str, subprocess.CompletedProcess[str]] = {}

            def stop() -> None:
                stopping["result"] = stack.run("stop", timeout=300)

            stopper = threading.Thread(target=stop)
            asked = time.monotonic()
            stopper.start()
            for chunk in chunks:
                received += chunk
            ended = time.monotonic() - asked
    stopper.join(timeout=300)

    last = final_event(received)
    outcome = "completed" if last == "[DONE]" else "ended with the draining error event"
    print(f"\ncompose stop: the stream {outcome} {ended:.1f} s after the stop")
    if last != "[DONE]":
        assert json.loads(last)["error"]["code"] == "draining", last
    assert ended < grace + MARGIN, f"the stream ended {ended:.1f} s after the stop"
    result = stopping["result"]
    assert result.returncode == 0, result.stderr
    for container in stack.containers(gateway):
        state = podman.inspect(container)["State"]
        assert state["Status"] == "exited", state["Status"]
        assert state["ExitCode"] == 0, f"{container} exited with {state['ExitCode']}"
    # Every other service stopped by itself too, inside its grace period:
    # 137 is the SIGKILL that follows when a container ignores SIGTERM.
    exits = {
        container: podman.inspect(container)["State"]["ExitCode"]
        for service in stack.runnable()
        for container in stack.containers(service)
    }
    print(f"exit codes: {exits}")
    assert 137 not in exits.values(), exits
