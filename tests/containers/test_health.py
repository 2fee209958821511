"""The stack's health as Docker and Prometheus see it: every container's
HEALTHCHECK passing, every Prometheus target up."""

import time
from pathlib import Path, PurePosixPath
from typing import Any

import httpx
import pytest
import yaml

from tests.containers import podman
from tests.containers.compose import ComposeProject

# The first test also waits for the stack to come up (see conftest.HEALTHY_WITHIN),
# the last one for it to go down.
pytestmark = pytest.mark.timeout(1800)

TARGETS_UP_WITHIN = 60.0


def test_every_container_has_a_passing_healthcheck(stack: ComposeProject) -> None:
    for service in stack.runnable():
        containers = stack.containers(service)
        assert containers, f"{service} has no container"
        for container in containers:
            assert podman.has_healthcheck(container), f"{service} has no health check"
            assert podman.health_status(container) == "healthy", service


def test_images_built_from_the_project_keep_their_healthcheck(stack: ComposeProject) -> None:
    """The Dockerfiles' own HEALTHCHECK survives the build (docker format)."""
    for service in stack.runnable():
        if not stack.image_built_here(service):
            continue
        image = stack.services[service]["image"]
        config = podman.podman(
            "image", "inspect", "--format", "{{json .Config.Healthcheck}}", image
        )
        assert "Test" in config, f"{image} lost its HEALTHCHECK"


def prometheus_services(stack: ComposeProject) -> list[str]:
    return [
        name
        for name in stack.runnable()
        if any(
            str(arg).startswith("--config.file=") for arg in stack.services[name].get("command", [])
        )
    ]


def config_file_source(stack: ComposeProject, service: str) -> Path:
    """The repository file mounted as the service's --config.file."""
    command = stack.services[service]["command"]
    path = next(
        str(arg).split("=", 1)[1] for arg in command if str(arg).startswith("--config.file=")
    )
    for volume in stack.services[service].get("volumes", []):
        if isinstance(volume, dict):
            source, target = volume["source"], volume["target"]
        else:
            source, target = str(volume).split(":")[:2]
        if PurePosixPath(target) == PurePosixPath(path):
            return Path(source)
    raise AssertionError(f"{service}: {path} is not mounted from the repository")


def scrape_config(stack: ComposeProject, service: str) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(config_file_source(stack, service).read_text())
    return config


def targets_once_up(port: int, wanted: list[set[str]]) -> list[dict[str, Any]]:
    """Prometheus' active targets, once all are up and one address of each
    wanted set is among them (DNS discovery refreshes every few seconds), or
    once the wait is over."""
    deadline = time.monotonic() + TARGETS_UP_WITHIN
    while True:
        reply = httpx.get(f"http://127.0.0.1:{port}/api/v1/targets", timeout=10).json()
        active: list[dict[str, Any]] = reply["data"]["activeTargets"]
        up = bool(active) and all(target["health"] == "up" for target in active)
        scraped = {target["labels"]["instance"] for target in active}
        if (up and all(a & scraped for a in wanted)) or time.monotonic() > deadline:
            return active
        time.sleep(1)


def scrape_addresses(stack: ComposeProject) -> dict[str, set[str]]:
    """address:port Prometheus should scrape for each gateway (its metrics
    port: the admin port when set) and each engine container."""
    wanted: dict[str, set[str]] = {}
    for gateway in stack.gateways():
        port = stack.metrics_port(gateway)
        for container in stack.containers(gateway):
            wanted[container] = {f"{ip}:{port}" for ip in podman.addresses(container)}
    for engine in stack.engines():
        for container in stack.containers(engine.service):
            wanted[container] = {f"{ip}:{engine.port}" for ip in podman.addresses(container)}
    return wanted


def test_prometheus_scrapes_every_target(stack: ComposeProject) -> None:
    """Every gateway replica (on its admin port) and every engine, found by
    Prometheus itself (DNS discovery), is scraped and up."""
    services = prometheus_services(stack)
    assert services, "no Prometheus in the compose configuration"
    wanted = scrape_addresses(stack)
    assert len(wanted) >= 3, wanted
    for service in services:
        jobs = {job["job_name"] for job in scrape_config(stack, service)["scrape_configs"]}
        active = targets_once_up(stack.published_port(service, 9090), list(wanted.values()))
        down = [f"{t['scrapeUrl']}: {t['lastError']}" for t in active if t["health"] != "up"]
        assert not down, f"targets not up: {down}"
        assert {t["labels"]["job"] for t in active} == jobs
        scraped = {t["labels"]["instance"] for t in active}
        missing = {c: a for c, a in wanted.items() if not a & scraped}
        assert not missing, f"not scraped: {missing} (scraped: {sorted(scraped)})"


def rule_groups(stack: ComposeProject, service: str) -> set[str]:
    """Rule group names in the files the config's rule_files name, read from
    the repository next to the config file, as the mounts place them."""
    config_source = config_file_source(stack, service)
    groups: set[str] = set()
    for pattern in scrape_config(stack, service).get("rule_files", []):
        for path in sorted(config_source.parent.glob(pattern)):
            groups |= {group["name"] for group in yaml.safe_load(path.read_text())["groups"]}
    return groups


def test_prometheus_loads_the_rules(stack: ComposeProject) -> None:
    for service in prometheus_services(stack):
        expected = rule_groups(stack, service)
        assert expected, "the config names no rules"
        port = stack.published_port(service, 9090)
        reply = httpx.get(f"http://127.0.0.1:{port}/api/v1/rules", timeout=10).json()
        loaded = {group["name"] for group in reply["data"]["groups"]}
        assert loaded == expected
