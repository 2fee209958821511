"""Two gateway replicas in front of the real engine, sharing state on a
primary that Redis Sentinel watches: the primary killed under load, its
replica promoted, the gateways follow and nothing is lost.

What a gateway does in the gap (its share, as with Redis down) and how the
holds a fail-over loses are written back is held open and checked step by
step in tests/state/test_sentinel.py; here the sentinel fails over on its
own, as in production, while streams run."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.engines import Engine
from tests.support.failover import load_through_a_fail_over, shared_state_up
from tests.support.gateways import StartGateway
from tests.support.redis_sentinel import SentinelGroup


@pytest.fixture
def sentinel_group(tmp_path: Path) -> Iterator[SentinelGroup]:
    started = SentinelGroup(tmp_path)
    try:
        started.start()
        yield started
    finally:
        started.stop()


async def test_the_primary_killed_under_load_is_followed_to_its_replica_and_nothing_is_lost(
    idle_engine: Engine, start_gateway: StartGateway, sentinel_group: SentinelGroup
) -> None:
    gateways = [
        start_gateway(idle_engine.url, queue_timeout=300, **sentinel_group.settings())
        for _ in range(2)
    ]
    await shared_state_up(gateways)
    await load_through_a_fail_over(gateways, sentinel_group.fail_over)
