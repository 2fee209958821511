"""Real gateway processes (``python -m app``) for the tests, and what they
write: the access log."""

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from deploy.local import ManagedProcess, free_port
from tests.support.services import Service
from tests.support.wait import wait_until

Gateway = Service
StartGateway = Callable[..., Gateway]


def launch_gateway(
    log_dir: Path,
    upstream_url: str,
    settings: dict[str, object],
    wrap: Callable[[list[str]], list[str]] | None = None,
    environ: dict[str, str] | None = None,
) -> Gateway:
    """A gateway in front of ``upstream_url``, once it is live (not yet
    ready: its engines may still be unknown); ``settings`` are its
    ``GATEWAY_*`` settings by their lower-case names, ``environ`` any other
    variables (``OTEL_*``). ``wrap`` gives the
    command line that runs it (the DNS test's mount namespace). A gateway
    that never goes live is stopped."""
    port = free_port()
    env = {
        "GATEWAY_PORT": str(port),
        "GATEWAY_UPSTREAM_URL": upstream_url,
        "GATEWAY_HEALTH_INTERVAL": "0.5",
        **{f"GATEWAY_{key.upper()}": str(value) for key, value in settings.items()},
        **(environ or {}),
    }
    argv = [sys.executable, "-m", "app"]
    proc = ManagedProcess(f"gateway-{port}", wrap(argv) if wrap else argv, env, log_dir)
    url = f"http://127.0.0.1:{port}"
    try:
        proc.wait_http(f"{url}/health/live", timeout=60)
    except BaseException:
        proc.stop()
        raise
    return Service(url, proc)


@contextmanager
def running_gateway(
    log_dir: Path, upstream_url: str, settings: dict[str, object]
) -> Iterator[Gateway]:
    """``launch_gateway``, once ready; stopped on exit."""
    gateway = launch_gateway(log_dir, upstream_url, settings)
    try:
        gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)
        yield gateway
    finally:
        gateway.process.stop()


def access_log(gateway: Gateway) -> list[dict[str, Any]]:
    """The gateway's access log so far: one JSON object per finished request
    (its application log's JSON lines name their ``logger``; these do not)."""
    lines = [
        json.loads(line)
        for line in gateway.process.log_text().splitlines()
        if line.startswith('{"ts"')
    ]
    return [line for line in lines if "logger" not in line]


def assert_all_served_once(gateways: Sequence[Gateway], bodies: Sequence[bytes]) -> None:
    """Every stream ran to its end, none failed, and each request the
    gateways counted has exactly one outcome in their access logs."""
    assert all(b.endswith(b"data: [DONE]\n\n") for b in bodies)
    for gateway in gateways:
        assert gateway.metric("gateway_requests_total", outcome="failed") == 0
        assert gateway.metric("gateway_requests_total") == sum(
            1 for e in access_log(gateway) if e["outcome"]
        )


def access_line(gateway: Gateway, request_id: str) -> dict[str, Any]:
    """The access-log line of the request answered as ``request_id``, once written."""
    lines: list[dict[str, Any]] = []

    def found() -> bool:
        lines[:] = [e for e in access_log(gateway) if e.get("request_id") == request_id]
        return bool(lines)

    assert wait_until(found, timeout=30), f"no access-log line for {request_id}"
    return lines[-1]
