"""`docker compose stop` with a stream in flight through every gateway
replica: each gateway drains (its stream completes, or ends with the SSE
error event when the grace period runs out) and exits 0. Stops the stack, so
it runs last."""

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from app.settings import default
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


class Stream:
    """One long streamed completion through a gateway, read to its end."""

    def __init__(self, stack: ComposeProject, gateway: str, share: int, exits: ExitStack) -> None:
        self.gateway = gateway
        port = stack.gateway_port(gateway)
        http = exits.enter_context(httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120))
        model = http.get("/v1/models").json()["data"][0]
        body = {
            "model": model["id"],
            "messages": [{"role": "user", "content": "Write a long story."}],
            # The streams share one engine's context-sized KV budget.
            "max_tokens": (int(model.get("max_model_len", 2048)) - 64) // share,
            "ignore_eos": True,
            "stream": True,
        }
        response = exits.enter_context(http.stream("POST", "/v1/chat/completions", json=body))
        assert response.status_code == 200, gateway
        self.chunks: Iterator[bytes] = response.iter_raw()
        self.received = b""
        self.ended: float | None = None

    def wait_for_content(self) -> None:
        while b'"content":"' not in self.received:
            self.received += next(self.chunks)

    def read_to_end(self, asked: float) -> None:
        for chunk in self.chunks:
            self.received += chunk
        self.ended = time.monotonic() - asked


@pytest.mark.last
def test_compose_stop_drains_every_gateway(stack: ComposeProject) -> None:
    gateways = stack.gateways()
    # Compose passes each setting from .env, empty when .env does not set it:
    # the gateway's own default then.
    grace = max(
        float(
            stack.services[g]["environment"].get("GATEWAY_DRAIN_GRACE_SECONDS")
            or default("drain_grace_seconds")
        )
        for g in gateways
    )
    stopping: dict[str, subprocess.CompletedProcess[str]] = {}

    def stop() -> None:
        stopping["result"] = stack.run("stop", timeout=300)

    with ExitStack() as exits:
        streams = [Stream(stack, gateway, len(gateways), exits) for gateway in gateways]
        for stream in streams:
            stream.wait_for_content()
        stopper = threading.Thread(target=stop)
        asked = time.monotonic()
        stopper.start()
        readers = [threading.Thread(target=stream.read_to_end, args=(asked,)) for stream in streams]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(timeout=grace + 2 * MARGIN)
    stopper.join(timeout=300)

    for stream in streams:
        assert stream.ended is not None, f"{stream.gateway}: the stream never ended"
        last = final_event(stream.received)
        outcome = "completed" if last == "[DONE]" else "ended with the draining error event"
        print(f"\ncompose stop: {stream.gateway}'s stream {outcome} {stream.ended:.1f} s after")
        if last != "[DONE]":
            assert json.loads(last)["error"]["code"] == "draining", last
        assert stream.ended < grace + MARGIN, f"{stream.gateway}: ended {stream.ended:.1f} s after"
    result = stopping["result"]
    assert result.returncode == 0, result.stderr
    for gateway in gateways:
        for container in stack.containers(gateway):
            state = podman.inspect(container)["State"]
            assert state["Status"] == "exited", f"{container}: {state['Status']}"
            assert state["ExitCode"] == 0, f"{container} exited with {state['ExitCode']}"
    # Every other service stopped by itself too, inside its grace period:
    # 137 is the SIGKILL that follows when a container ignores SIGTERM.
    exits_codes = {
        container: podman.inspect(container)["State"]["ExitCode"]
        for service in stack.runnable()
        for container in stack.containers(service)
    }
    print(f"exit codes: {exits_codes}")
    assert 137 not in exits_codes.values(), exits_codes
