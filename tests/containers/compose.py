"""The CPU compose stack, as docker-compose sees it: its resolved
configuration, and commands run against podman's Docker API.

Everything the container tests check is read from the resolved configuration
(``docker-compose config``), not written down a second time: which services
are gateways (built from the project's Dockerfile), which engines they send
to (their upstream URLs), where each one is published, what Prometheus is
told to scrape. More gateways, engines or an admin port for metrics change
the configuration, and the tests follow.

Third-party images no registry here can give (Prometheus, Redis, the Python
base of the project's images) are named in the compose files by variable;
every run sets those variables to the local stand-ins (see stand_ins.py), so
the resolved configuration, and every build from it, names them.
"""

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from deploy.local import free_port
from tests.containers.stand_ins import stand_ins
from tests.support.compose_files import compose_variables

ROOT = Path(__file__).resolve().parents[2]
CPU_FILES = ("docker-compose.yml", "docker-compose.cpu.yml")
GATEWAY_DOCKERFILE = "Dockerfile"

# Services whose image cannot be had on this machine kind: no registry is
# reachable and Debian packages no Grafana. They are left out of the run (and
# the run fails if anything else would be).
UNAVAILABLE_IMAGES = {"grafana/grafana": "Grafana: no registry here, and no Debian package"}

Service = dict[str, Any]


def variable_defaults() -> dict[str, str]:
    """The default of every ${NAME:-default} in the compose files."""
    found: dict[str, str] = {}
    for name in CPU_FILES:
        text = (ROOT / name).read_text()
        found |= dict(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*):-([^}]*)\}", text))
    return found


def publish_port_variables() -> list[str]:
    """The settings that choose host ports (PUBLISH_<SERVICE>_PORT)."""
    return sorted(
        name for name in compose_variables(CPU_FILES) if re.fullmatch(r"PUBLISH_\w+_PORT", name)
    )


def repository(image: str) -> str:
    """prom/prometheus:v3.5.0 -> prom/prometheus"""
    name = image.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]


def port_mapping(entry: str | dict[str, Any]) -> tuple[int | None, int]:
    """(host port or None, container port) of a `ports:` entry, in either
    syntax: "127.0.0.1:8000:8000/tcp" or {published: 8000, target: 8000}."""
    if isinstance(entry, dict):
        published = entry.get("published")
        return (int(published) if published else None), int(entry["target"])
    parts = str(entry).split("/")[0].split(":")
    return (int(parts[-2]) if len(parts) >= 2 else None), int(parts[-1])


@dataclass(frozen=True)
class Endpoint:
    service: str
    port: int


class ComposeProject:
    """One run of the CPU variant under its own project name, on free host
    ports, against the podman API service at ``docker_host``."""

    def __init__(self, name: str, env_file: Path, docker_host: str | None = None) -> None:
        self.name = name
        self.env_file = env_file
        read = compose_variables(CPU_FILES)
        # The defaults in the compose files, not whatever this shell sets
        # (`make` exports ENGINE_* for the local stack), except host ports.
        self.env = {
            key: value
            for key, value in os.environ.items()
            if key not in read and not key.startswith(("COMPOSE_", "DOCKER_"))
        }
        if docker_host:
            self.env["DOCKER_HOST"] = docker_host
        self.env.update({name: str(free_port()) for name in publish_port_variables()})
        # The local images in place of the upstream defaults.
        self.stand_ins = stand_ins(read)
        self.env.update(self.stand_ins)
        self.config = self._resolve()

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        files = [arg for name in CPU_FILES for arg in ("-f", name)]
        argv = ["docker-compose", "--env-file", str(self.env_file), "-p", self.name, *files]
        return subprocess.run(
            [*argv, *args],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def check(self, *args: str, timeout: float = 600) -> str:
        result = self.run(*args, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(f"docker-compose {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def _resolve(self) -> dict[str, Any]:
        config = yaml.safe_load(self.check("config", timeout=60))
        assert isinstance(config, dict)
        return config

    @property
    def services(self) -> dict[str, Service]:
        found: dict[str, Service] = self.config["services"]
        return found

    def runnable(self) -> list[str]:
        """Services `up` starts (no profile), less those no image exists for."""
        return [
            name
            for name, service in self.services.items()
            if not service.get("profiles")
            and repository(service["image"]) not in UNAVAILABLE_IMAGES
        ]

    def left_out(self) -> dict[str, str]:
        return {
            name: UNAVAILABLE_IMAGES[repository(service["image"])]
            for name, service in self.services.items()
            if not service.get("profiles") and repository(service["image"]) in UNAVAILABLE_IMAGES
        }

    def gateways(self) -> list[str]:
        """Services that run the image built from the project's gateway
        Dockerfile (replicas may name the image without building it again)."""
        images = {
            service["image"]
            for service in self.services.values()
            if service.get("build", {}).get("dockerfile") == GATEWAY_DOCKERFILE
        }
        return [name for name in self.runnable() if self.services[name]["image"] in images]

    def upstreams(self, gateway: str) -> list[Endpoint]:
        """The engines a gateway sends to (GATEWAY_UPSTREAM_URLS or _URL)."""
        env = self.services[gateway].get("environment", {})
        urls = env.get("GATEWAY_UPSTREAM_URLS") or env.get("GATEWAY_UPSTREAM_URL", "")
        endpoints = []
        for url in str(urls).split(","):
            parts = urlsplit(url.strip())
            assert parts.hostname in self.services, f"{gateway}: {url} is not a compose service"
            endpoints.append(Endpoint(parts.hostname, parts.port or 80))
        return endpoints

    def trace_backend(self) -> Endpoint:
        """Where the gateways send their spans (OTLP/HTTP): the service and
        its port, which serves the backend's UI and REST API too."""
        found = set()
        for gateway in self.gateways():
            url = self.services[gateway]["environment"]["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
            parts = urlsplit(str(url))
            assert parts.hostname in self.services, f"{gateway}: {url} is not a compose service"
            found.add(Endpoint(parts.hostname, parts.port or 80))
        (endpoint,) = found
        return endpoint

    def engines(self) -> list[Endpoint]:
        found: dict[str, Endpoint] = {}
        for gateway in self.gateways():
            for endpoint in self.upstreams(gateway):
                found[endpoint.service] = endpoint
        return list(found.values())

    def image_built_here(self, service: str) -> bool:
        """Whether the service runs an image built from one of the project's
        Dockerfiles (by this service or another one naming the same image)."""
        built = {s["image"] for s in self.services.values() if "build" in s}
        return self.services[service]["image"] in built

    def published_port(self, service: str, target: int) -> int:
        """The host port a service's container port is published on."""
        for entry in self.services[service].get("ports", []):
            published, container = port_mapping(entry)
            if container == target and published:
                return published
        raise AssertionError(f"{service}: port {target} is not published")

    def gateway_port(self, gateway: str) -> int:
        """Where clients reach a gateway: the host port of its GATEWAY_PORT."""
        port = int(self.services[gateway]["environment"]["GATEWAY_PORT"])
        return self.published_port(gateway, port)

    def admin_port(self, gateway: str) -> int | None:
        """The gateway's admin port (/metrics), inside the network, if set."""
        port = self.services[gateway]["environment"].get("GATEWAY_ADMIN_PORT")
        return int(port) if port else None

    def metrics_port(self, gateway: str) -> int:
        """Where the gateway serves /metrics inside the network."""
        admin = self.admin_port(gateway)
        return (
            admin
            if admin is not None
            else int(self.services[gateway]["environment"]["GATEWAY_PORT"])
        )

    def redis_services(self) -> list[str]:
        """Services the gateways keep their shared state in (GATEWAY_REDIS_URL)."""
        found = set()
        for gateway in self.gateways():
            url = self.services[gateway].get("environment", {}).get("GATEWAY_REDIS_URL")
            if url:
                host = urlsplit(str(url)).hostname
                assert host in self.services, f"{gateway}: {url} is not a compose service"
                found.add(host)
        return sorted(found)

    def containers(self, service: str) -> list[str]:
        """Names of a service's containers (several once it is scaled)."""
        out = subprocess.run(
            [
                "podman",
                "ps",
                "--all",
                "--filter",
                f"label=com.docker.compose.project={self.name}",
                "--filter",
                f"label=com.docker.compose.service={service}",
                "--format",
                "{{.Names}}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
        return sorted(out.split())
