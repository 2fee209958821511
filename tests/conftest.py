"""Fixtures: one real engine per test session (exporting its traces to the
session's real trace backend), gateways started per test or module, a real
redis-server per test. What they start is in tests/support/ (engines.py,
trace_backend.py, gateways.py, redis_server.py)."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.engines import LORA, SMALL_ENGINE, Engine, engine_idle, running_engine
from tests.support.gateways import Gateway, StartGateway, launch_gateway, running_gateway
from tests.support.redis_cluster import RedisClusterNodes
from tests.support.redis_server import RedisServer
from tests.support.trace_backend import TraceBackend, running_trace_backend
from tests.support.wait import wait_until


@pytest.fixture(scope="session")
def trace_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TraceBackend]:
    with running_trace_backend(tmp_path_factory.mktemp("traces")) as started:
        yield started


@pytest.fixture(scope="session")
def engine(
    tmp_path_factory: pytest.TempPathFactory, trace_backend: TraceBackend
) -> Iterator[Engine]:
    env = {
        # Every address, not only 127.0.0.1: the DNS discovery test answers
        # with 127.0.0.2 and 127.0.0.3, two engines to the gateway.
        "ENGINE_HOST": "0.0.0.0",
        # vLLM's llm_request span of every request, over OTLP/gRPC (its
        # default), a second to the batch: tests/e2e/test_traces.py.
        "ENGINE_OTLP_TRACES_ENDPOINT": trace_backend.otlp_grpc,
        "OTEL_BSP_SCHEDULE_DELAY": "1000",
        # The Responses API keeps each response in the engine (retrieve,
        # continue, cancel): tests/e2e/test_responses.py.
        "VLLM_ENABLE_RESPONSES_API_STORE": "1",
        # /pause and /resume: a test holds requests in the engine, unscheduled,
        # for as long as it needs (tests/e2e/test_live_page.py).
        "VLLM_SERVER_DEV_MODE": "1",
        **SMALL_ENGINE,
        # Two LoRA adapters, one slot: tests/e2e/fleet/test_adapters.py.
        **LORA,
    }
    # Its KV cache events beside its port (KV_EVENTS): tests/e2e/fleet/test_kv_events.py.
    with running_engine(
        "engine", tmp_path_factory.mktemp("engine"), env, kv_events=True
    ) as started:
        yield started


@pytest.fixture
def idle_engine(engine: Engine) -> Engine:
    """The engine, after whatever an earlier test left running has ended."""
    assert wait_until(lambda: engine_idle(engine.metric), timeout=60), "engine still busy"
    return engine


@pytest.fixture
def start_gateway(tmp_path: Path) -> Iterator[StartGateway]:
    """Start gateways (``start_gateway(upstream_url, admission="off", ...)``;
    ``environ`` adds other variables, e.g. ``OTEL_*``); all are stopped when
    the test ends."""
    started: list[Gateway] = []

    def start(
        upstream_url: str, environ: dict[str, str] | None = None, **settings: object
    ) -> Gateway:
        gateway = launch_gateway(tmp_path, upstream_url, settings, environ=environ)
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        gateway.process.stop()


@pytest.fixture(scope="module")
def gateway(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """A gateway in front of the session engine, admission off, shared by a module."""
    log_dir = tmp_path_factory.mktemp("gateway")
    with running_gateway(log_dir, engine.url, {"admission": "off"}) as started:
        yield started


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A real redis-server of the test's own, no persistence."""
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterNodes]:
    """A real Redis Cluster (three primaries, each with a replica) shared by
    the session: its users empty it first (``flush``). A test that kills a
    node starts a cluster of its own."""
    cluster = RedisClusterNodes(tmp_path_factory.mktemp("redis-cluster"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(params=["one", "cluster"])
def redis_store(request: pytest.FixtureRequest) -> Iterator[RedisServer | RedisClusterNodes]:
    """The shared state's Redis, each way the gateway runs on it: one
    redis-server of the test's own, then the session's cluster, emptied."""
    if request.param == "cluster":
        cluster: RedisClusterNodes = request.getfixturevalue("redis_cluster")
        cluster.flush()
        yield cluster
        return
    yield request.getfixturevalue("redis")
