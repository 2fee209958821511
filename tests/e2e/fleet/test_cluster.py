"""Two gateway replicas in front of the real engine, sharing state on a Redis
Cluster: the primary that holds the fair order (every admission's first
step) killed under load, its replica promoted, the gateways follow and
nothing is lost.

The cluster's other behaviours (the holds in two steps, the charge undone,
the keys' limits on their slots) are checked on the session's cluster in
tests/state/test_redis.py; this one kills a node, so it has a cluster of its
own."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.state import layout
from tests.support.engines import Engine
from tests.support.failover import load_through_a_fail_over, shared_state_up
from tests.support.gateways import StartGateway
from tests.support.redis_cluster import RedisClusterNodes


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RedisClusterNodes]:
    started = RedisClusterNodes(tmp_path)
    try:
        started.start()
        yield started
    finally:
        started.stop()


async def test_the_fair_orders_primary_killed_under_load_is_followed_and_nothing_is_lost(
    idle_engine: Engine, start_gateway: StartGateway, cluster: RedisClusterNodes
) -> None:
    gateways = [
        start_gateway(idle_engine.url, queue_timeout=300, **cluster.settings()) for _ in range(2)
    ]
    await shared_state_up(gateways)

    def fail_over() -> None:
        # The primary of every admission's first step.
        cluster.kill(cluster.primary_of(layout.fleet()))
        cluster.wait_promoted()

    await load_through_a_fail_over(gateways, fail_over)
