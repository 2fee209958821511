"""Podman, as the container tests drive it: its Docker API service for
docker-compose, container inspection, and health checks.

Podman has no daemon that runs health checks on a timer (that is systemd's job
on a full host), so a container's health stays ``starting`` until someone runs
``podman healthcheck run``. :class:`HealthChecks` is that someone: a thread
that runs every container's check every few seconds, as Docker would.
"""

import contextlib
import json
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx

HEALTH_INTERVAL = 2.0


def podman(*args: str, timeout: float = 120, check: bool = True) -> str:
    result = subprocess.run(
        ["podman", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def require_podman() -> None:
    if shutil.which("podman") is None:
        raise RuntimeError("podman is not installed: run deploy/containers/setup.sh")


def inspect(container: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = json.loads(podman("container", "inspect", container))
    return found[0]


def health_status(container: str) -> str:
    state = inspect(container)["State"]
    health = state.get("Health") or state.get("Healthcheck") or {}
    return str(health.get("Status", ""))


def has_healthcheck(container: str) -> bool:
    return bool(inspect(container)["Config"].get("Healthcheck", {}).get("Test"))


def exec_in(container: str, *argv: str, timeout: float = 60) -> str:
    return podman("exec", container, *argv, timeout=timeout)


def addresses(container: str) -> set[str]:
    """The container's IP addresses on its networks (as other containers and
    DNS discovery see it)."""
    networks = inspect(container)["NetworkSettings"].get("Networks") or {}
    return {str(n["IPAddress"]) for n in networks.values() if n.get("IPAddress")}


def project_containers(project: str, running_only: bool = True) -> list[str]:
    """Names of the containers docker-compose made for ``project``."""
    args = ["ps", "--filter", f"label=com.docker.compose.project={project}"]
    if not running_only:
        args.append("--all")
    return podman(*args, "--format", "{{.Names}}").split()


class ApiService:
    """``podman system service`` on a socket of its own, for docker-compose
    (DOCKER_HOST); stopped by :meth:`stop` whatever happened."""

    def __init__(self, socket: Path, log: Path) -> None:
        self.socket = socket
        self.url = f"unix://{socket}"
        self._log = log.open("wb")
        self._proc = subprocess.Popen(
            ["podman", "system", "service", "--time=0", self.url],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"podman system service exited ({self._proc.returncode})")
            if self.socket.exists():
                transport = httpx.HTTPTransport(uds=str(self.socket))
                try:
                    with httpx.Client(transport=transport, timeout=5) as client:
                        if client.get("http://podman/_ping").status_code == 200:
                            return
                except httpx.TransportError:
                    pass
            time.sleep(0.2)
        raise RuntimeError("podman's API service did not answer")

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=30)
        self._log.close()


class HealthChecks:
    """Runs the health check of every running container of a compose project,
    every :data:`HEALTH_INTERVAL` seconds, until stopped."""

    def __init__(self, project: str) -> None:
        self._project = project
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="healthchecks", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                containers = project_containers(self._project)
            except (RuntimeError, subprocess.TimeoutExpired):
                containers = []
            for container in containers:
                # Non-zero means "unhealthy" or "has no check" (or the container
                # just stopped): podman records the result either way, and the
                # tests read the recorded status.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    subprocess.run(
                        ["podman", "healthcheck", "run", container],
                        capture_output=True,
                        timeout=60,
                        check=False,
                    )
            self._stop.wait(HEALTH_INTERVAL)
