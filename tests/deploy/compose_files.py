"""The compose files as `docker-compose config` resolves them, offline, for
the checks of the compose stacks (test_compose.py) and of the Kubernetes
manifests, which must agree with them (test_k8s.py)."""

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.compose_files import compose_variables

ROOT = Path(__file__).resolve().parents[2]
BASE = "docker-compose.yml"
GPU_FILE = "docker-compose.override.yml"
CPU_FILE = "docker-compose.cpu.yml"
KEYS_FILE = "docker-compose.keys.yml"
ENGINES_FILE = "docker-compose.engines.yml"
COMPOSE_FILES = (BASE, GPU_FILE, CPU_FILE, KEYS_FILE, ENGINES_FILE)
# What each variant's command line names: the GPU stack is plain `docker
# compose up`, which reads docker-compose.yml and its override by itself.
VARIANTS: dict[str, list[str]] = {"gpu": [], "cpu": ["-f", BASE, "-f", CPU_FILE]}
# The optional files, on top of a variant.
WITH_KEYS = ["-f", BASE, "-f", CPU_FILE, "-f", KEYS_FILE]
WITH_TWO_ENGINES = ["-f", BASE, "-f", GPU_FILE, "-f", ENGINES_FILE]
ENGINE = "vllm"

Service = dict[str, Any]
Resolved = dict[str, Any]


def required_tool(name: str) -> str:
    """A tool the checks need: next to this interpreter (the venv) or on PATH.
    A missing tool fails the test; it never skips it."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed (CI installs it; see .ci/run)")
    return found


@dataclass
class Compose:
    binary: str
    env_file: Path
    _resolved: dict[str, Resolved] = field(default_factory=dict)

    def run(self, variant: str, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run_files(VARIANTS[variant], *args)

    def run_files(
        self, files: list[str], *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        # The defaults in the files, not whatever this shell or a local .env
        # sets (`make` exports ENGINE_* for the local stack).
        read = compose_variables(COMPOSE_FILES)
        clean = {
            key: value
            for key, value in os.environ.items()
            if key not in read and not key.startswith("COMPOSE_")
        }
        argv = [self.binary, "--env-file", str(self.env_file), *files, *args]
        return subprocess.run(
            argv,
            cwd=ROOT,
            env={**clean, **(env or {})},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def resolved_files(self, files: list[str], env: dict[str, str] | None = None) -> Resolved:
        result = self.run_files(files, "config", env=env)
        assert result.returncode == 0, result.stderr
        config = yaml.safe_load(result.stdout)
        assert isinstance(config, dict)
        return config

    def resolved(self, variant: str) -> Resolved:
        if variant not in self._resolved:
            self._resolved[variant] = self.resolved_files(VARIANTS[variant])
        return self._resolved[variant]


def image_tag(image: str) -> str | None:
    """The tag (or digest) of an image reference, None when it has neither."""
    if "@" in image:
        return image.split("@", 1)[1]
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def container_ports(service: Service) -> set[int]:
    """Ports the service is reached on inside the compose network, as its
    port mappings and `expose` name them."""
    ports: set[int] = set()
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            ports.add(int(entry["target"]))
        else:
            ports.add(int(str(entry).split("/")[0].rsplit(":", 1)[-1]))
    ports |= {int(str(port).split("/")[0]) for port in service.get("expose", [])}
    return ports


def published_ports(service: Service) -> set[int]:
    """Container ports published on the host."""
    return container_ports({"ports": service.get("ports", [])})


def duration_seconds(text: str) -> float:
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", text)
    assert "".join(n + u for n, u in parts) == text, f"not a duration: {text}"
    return sum(float(number) * units[unit] for number, unit in parts)


def gateway_services(config: Resolved) -> list[str]:
    """Services that run the gateway image (built from the root Dockerfile)."""
    return sorted(
        name
        for name, service in config["services"].items()
        if Path(service.get("build", {}).get("context", "")) == ROOT
        and service["build"].get("dockerfile", "Dockerfile") == "Dockerfile"
    )
