"""Local processes for the tests, the benchmarks and the experiments:
starting and stopping engines and gateways, and reading their ``/metrics``.

Every process starts in a session of its own, so stopping it signals the
whole group: vLLM's engine core is a child that outlives a kill of its
parent alone.
"""

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

from app.observe.promtext import Sample, parse, total

Samples = list[Sample]

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def free_port_with(*offsets: int) -> int:
    """A free port whose neighbours at ``offsets`` are free too (an engine's
    KV cache events beside its HTTP port, a Redis Cluster node's bus)."""
    for _ in range(100):
        port = free_port()
        try:
            with contextlib.ExitStack() as held:
                for offset in offsets:
                    sock = held.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port + offset))
        # (OverflowError: a neighbour past port 65,535.)
        except (OSError, OverflowError):
            continue
        return port
    raise RuntimeError(f"no free port with free ports at {offsets} beside it")


class ManagedProcess:
    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_http(self, url: str, timeout: float) -> None:
        """Wait for ``url`` to answer 200; fail early if the process died."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited ({self.proc.returncode}):\n{self.log_tail()}"
                )
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"{self.name}: {url} not ready after {timeout}s:\n{self.log_tail()}")

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the process group, then SIGKILL whatever is left of it."""
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            if _group_gone(self.proc, wait):
                break
        self.proc.wait(timeout=10)
        self._log.close()


def _group_gone(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc.poll()
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def scrape(base_url: str) -> Samples:
    """Every sample of a process's ``/metrics``."""
    return parse(httpx.get(f"{base_url}/metrics", timeout=10).text)


def value(samples: Samples, name: str, labels: dict[str, str] | None = None) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels``."""
    return total(samples, name, labels)


def metric(base_url: str, name: str, **labels: str) -> float:
    return value(scrape(base_url), name, labels)
