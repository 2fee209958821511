"""Running the gateway (app/serve/run.py): several processes on one port with
``GATEWAY_REUSE_PORT``, and without it the second refused; what start-up
made is out of the garbage collector's way before it serves."""

import gc
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from app.serve import run
from app.serve.server import DrainingServer
from app.settings import Settings

# Ample for a process to start, bind and answer on a busy machine.
START_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def gateway(port: int, **variables: str) -> Iterator[subprocess.Popen[str]]:
    """``python -m app`` on ``port`` in its own process group, in front of an
    engine address where nothing listens (the gateway serves its health
    routes all the same); stopped with its group."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("GATEWAY_")}
    env |= {
        "GATEWAY_HOST": "127.0.0.1",
        "GATEWAY_PORT": str(port),
        "GATEWAY_UPSTREAM_URL": f"http://127.0.0.1:{free_port()}",
        "GATEWAY_DRAIN_GRACE_SECONDS": "0",
        **variables,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "app"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=START_TIMEOUT)
        assert proc.stderr is not None
        proc.stderr.close()


def wait_live(port: int, admin_port: int) -> None:
    """Until the gateway with this admin port answers (its own port alone)."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        try:
            answer = httpx.get(f"http://127.0.0.1:{admin_port}/health/live", timeout=2)
            if answer.status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    pytest.fail(f"the gateway on {port} (admin {admin_port}) did not start")


def test_two_processes_serve_one_port_with_reuse_port() -> None:
    port, admin_a, admin_b = free_port(), free_port(), free_port()
    with (
        gateway(port, GATEWAY_REUSE_PORT="true", GATEWAY_ADMIN_PORT=str(admin_a)) as a,
        gateway(port, GATEWAY_REUSE_PORT="true", GATEWAY_ADMIN_PORT=str(admin_b)) as b,
    ):
        wait_live(port, admin_a)
        wait_live(port, admin_b)
        assert a.poll() is None
        assert b.poll() is None
        # One gone, the port still answers: the other holds it too.
        os.killpg(a.pid, signal.SIGKILL)
        a.wait(timeout=START_TIMEOUT)
        assert httpx.get(f"http://127.0.0.1:{port}/health/live", timeout=10).status_code == 200


def test_without_reuse_port_a_second_process_is_refused_the_port() -> None:
    port, admin_a, admin_b = free_port(), free_port(), free_port()
    with gateway(port, GATEWAY_ADMIN_PORT=str(admin_a)):
        wait_live(port, admin_a)
        with gateway(port, GATEWAY_ADMIN_PORT=str(admin_b)) as second:
            assert second.wait(timeout=START_TIMEOUT) != 0
            assert second.stderr is not None
            assert "Address already in use" in second.stderr.read()


def test_what_start_up_made_is_frozen_before_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    """In process, up to the server's run (nothing listens, nothing logs)."""
    frozen: list[int] = []

    def serve(server: DrainingServer, sockets: list[socket.socket]) -> None:
        frozen.append(gc.get_freeze_count())
        for sock in sockets:
            sock.close()

    monkeypatch.setattr(DrainingServer, "run", serve)
    monkeypatch.setattr(run, "configure_logging", lambda *args: None)
    monkeypatch.setattr(run, "_listen", lambda *args, **kwargs: socket.socket())
    gc.unfreeze()
    try:
        run.run_gateway(Settings())
    finally:
        gc.unfreeze()
    assert len(frozen) == 1
    assert frozen[0] > 0
