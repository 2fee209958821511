"""Fixtures: one real engine per test session, gateways started per test or module.

The engine is real vLLM (CPU build, tiny local model) started by the project's
own launcher on a free port, with a small KV cache (24 blocks of 128 tokens)
and at most 8 running sequences, so tests can saturate it on purpose.
"""

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from deploy.local import ManagedProcess, free_port, metric
from tests.support.wait import wait_until

ENGINE_KV_BLOCKS = 24
ENGINE_MAX_NUM_SEQS = 8
MODEL = "tiny"


@dataclass
class Service:
    url: str
    process: ManagedProcess

    def metric(self, name: str, **labels: str) -> float:
        return metric(self.url, name, **labels)


Engine = Service
Gateway = Service
StartGateway = Callable[..., Gateway]


def engine_idle(engine: Engine) -> bool:
    return (
        engine.metric("vllm:num_requests_running") == 0
        and engine.metric("vllm:num_requests_waiting") == 0
    )


@contextmanager
def running_engine(name: str, log_dir: Path, env: dict[str, str]) -> Iterator[Engine]:
    """A real engine through the project's launcher on a free port, with the
    launcher's ``ENGINE_*`` settings in ``env``; stopped (its process group)
    on exit."""
    port = free_port()
    proc = ManagedProcess(
        name, ["deploy/engine/run-cpu.sh"], {"ENGINE_PORT": str(port), **env}, log_dir
    )
    try:
        url = f"http://127.0.0.1:{port}"
        proc.wait_http(f"{url}/health", timeout=900)
        yield Service(url, proc)
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    env = {
        # Every address, not only 127.0.0.1: the DNS discovery test answers
        # with 127.0.0.2 and 127.0.0.3, two engines to the gateway.
        "ENGINE_HOST": "0.0.0.0",
        "ENGINE_KV_BLOCKS": str(ENGINE_KV_BLOCKS),
        "ENGINE_MAX_NUM_SEQS": str(ENGINE_MAX_NUM_SEQS),
        "ENGINE_MODEL_NAME": MODEL,
    }
    with running_engine("engine", tmp_path_factory.mktemp("engine"), env) as started:
        yield started


@pytest.fixture
def idle_engine(engine: Engine) -> Engine:
    """The engine, after whatever an earlier test left running has ended."""
    assert wait_until(lambda: engine_idle(engine), timeout=60), "engine still busy"
    return engine


def launch_gateway(log_dir: Path, upstream_url: str, settings: dict[str, object]) -> Gateway:
    port = free_port()
    env = {
        "GATEWAY_PORT": str(port),
        "GATEWAY_UPSTREAM_URL": upstream_url,
        "GATEWAY_HEALTH_INTERVAL": "0.5",
        **{f"GATEWAY_{key.upper()}": str(value) for key, value in settings.items()},
    }
    proc = ManagedProcess(f"gateway-{port}", [sys.executable, "-m", "app"], env, log_dir)
    url = f"http://127.0.0.1:{port}"
    proc.wait_http(f"{url}/health/live", timeout=60)
    return Service(url, proc)


@pytest.fixture
def start_gateway(tmp_path: Path) -> Iterator[StartGateway]:
    """Start gateways (``start_gateway(upstream_url, admission="off", ...)``);
    all are stopped when the test ends."""
    started: list[Gateway] = []

    def start(upstream_url: str, **settings: object) -> Gateway:
        gateway = launch_gateway(tmp_path, upstream_url, settings)
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        gateway.process.stop()


@pytest.fixture(scope="module")
def gateway(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """A gateway in front of the session engine, admission off, shared by a module."""
    gateway = launch_gateway(tmp_path_factory.mktemp("gateway"), engine.url, {"admission": "off"})
    gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)
    try:
        yield gateway
    finally:
        gateway.process.stop()
