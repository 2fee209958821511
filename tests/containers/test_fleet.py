"""The gateway replicas as a fleet: each serves /metrics only on its admin
port, which is not published; all of them keep their shared state in the
same Redis and report the same view of the fleet."""

import httpx
import pytest

from app.observe.promtext import parse
from tests.containers import podman
from tests.containers.compose import ComposeProject
from tests.containers.metrics import FETCH

# The first test also waits for the stack to come up (see conftest.HEALTHY_WITHIN).
pytestmark = pytest.mark.timeout(1800)

FLEET_RESERVED = "gateway_fleet_kv_tokens_reserved"


def metrics_inside(container: str, port: int) -> str:
    return podman.exec_in(container, "python", "-c", FETCH, f"http://127.0.0.1:{port}/metrics")


def test_the_stack_runs_several_gateways(stack: ComposeProject) -> None:
    gateways = stack.gateways()
    assert len(gateways) >= 2, gateways
    ports = {stack.gateway_port(gateway) for gateway in gateways}
    assert len(ports) == len(gateways), "two gateways on one host port"


def test_metrics_are_served_only_on_the_unpublished_admin_port(stack: ComposeProject) -> None:
    for gateway in stack.gateways():
        admin = stack.admin_port(gateway)
        assert admin is not None, f"{gateway}: no GATEWAY_ADMIN_PORT"
        api = int(stack.services[gateway]["environment"]["GATEWAY_PORT"])
        published = httpx.get(f"http://127.0.0.1:{stack.gateway_port(gateway)}/metrics", timeout=10)
        assert published.status_code == 404, f"{gateway}: /metrics on the API port"
        for container in stack.containers(gateway):
            bindings = podman.inspect(container)["HostConfig"].get("PortBindings") or {}
            assert set(bindings) == {f"{api}/tcp"}, f"{container} publishes {sorted(bindings)}"
            assert "gateway_requests_total" in metrics_inside(container, admin)


def test_every_gateway_keeps_its_state_in_the_shared_redis(stack: ComposeProject) -> None:
    """Redis answers, and every gateway container holds a connection to it."""
    (redis,) = stack.redis_services()
    (container,) = stack.containers(redis)
    assert podman.exec_in(container, "redis-cli", "ping").strip() == "PONG"
    clients = podman.exec_in(container, "redis-cli", "client", "list")
    peers = {
        field.removeprefix("addr=").rsplit(":", 1)[0]
        for line in clients.splitlines()
        for field in line.split()
        if field.startswith("addr=")
    }
    for gateway in stack.gateways():
        for gateway_container in stack.containers(gateway):
            ips = podman.addresses(gateway_container)
            assert ips & peers, f"{gateway_container} ({ips}) is not a Redis client: {peers}"


def test_every_gateway_reports_the_fleets_reservations(stack: ComposeProject) -> None:
    """With Redis, each replica reports what the whole fleet reserves on each
    engine, read from Redis: the same engines on every replica."""
    seen: dict[str, set[str]] = {}
    for gateway in stack.gateways():
        for container in stack.containers(gateway):
            text = metrics_inside(container, stack.metrics_port(gateway))
            samples = parse(text, names=[FLEET_RESERVED])
            assert samples, f"{container}: no {FLEET_RESERVED}"
            seen[container] = {sample.labels["engine"] for sample in samples}
    assert len({frozenset(engines) for engines in seen.values()}) == 1, seen
