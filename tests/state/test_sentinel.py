"""Shared state on a primary that Redis Sentinel fails over (a real primary,
replica and sentinel): the replicas follow the promotion, run on their share
in the gap, and write back what the fail-over lost."""

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from redis.exceptions import RedisError

from app.settings import sentinel_nodes
from app.state.address import SentinelAddress
from app.state.fleet import FleetState
from app.state.redis import SharedRedis
from app.state.redis_limits import RedisLimits
from tests.support.redis_sentinel import SERVICE, SentinelGroup
from tests.support.stopped import stopped

BUDGET = (24, 100)


@pytest.fixture
def sentinel_group(tmp_path: Path) -> Iterator[SentinelGroup]:
    # Promoted by the test: the gap it looks into stays open until then.
    # Passwords on the data nodes and on the sentinel: each must reach
    # where it is asked for.
    started = SentinelGroup(tmp_path, automatic=False, passwords=("data-pw", "sentinel-pw"))
    try:
        started.start()
        yield started
    finally:
        started.stop()


@asynccontextmanager
async def replicas(group: SentinelGroup, size: int) -> AsyncIterator[list[SharedRedis]]:
    address = SentinelAddress(
        sentinel_nodes(group.sentinels),
        SERVICE,
        password=group.password,
        sentinel_password=group.sentinel_password,
    )
    # A lease no test outlasts (nothing here renews it); a timeout long for
    # a loopback call on a busy machine, short beside the waits below.
    shared = [SharedRedis(address, lease=120.0, timeout=2.0) for _ in range(size)]
    try:
        for one in shared:
            await one.heartbeat()
            assert one.up
        yield shared
    finally:
        for one in shared:
            await one.aclose()


async def test_replicas_share_holds_and_key_limits_through_the_primary_sentinel_names(
    sentinel_group: SentinelGroup,
) -> None:
    async with replicas(sentinel_group, 2) as shared:
        first, second = (FleetState(one) for one in shared)
        assert (await first.hold("e", (20, 1, 1), BUDGET, ("normal", "t", 1))).ok
        # The other replica sees the first's hold: 20 + 6 > 24.
        assert not (await second.hold("e", (6, 1, 1), BUDGET, ("normal", "u", 1))).ok
        assert (await second.hold("e", (4, 1, 1), BUDGET, ("normal", "u", 1))).ok
        # The keys' limits too, through the same client: the limits
        # library's window on the pool Sentinel points, and the scripts.
        limits = [RedisLimits(one) for one in shared]
        verdicts = [await limits[i % 2].hit_requests("k", 3, 60) for i in range(4)]
        assert [v.allowed for v in verdicts] == [True, True, True, False]
        assert await limits[0].acquire_slot("k", 1)
        assert not await limits[1].acquire_slot("k", 1)
        assert shared[0].status()["url"] == f"sentinel://{sentinel_group.sentinels}/{SERVICE}"


async def test_a_fail_over_is_followed_and_the_holds_it_lost_are_written_back(
    sentinel_group: SentinelGroup,
) -> None:
    assert sentinel_group.replica.process is not None
    async with replicas(sentinel_group, 2) as shared:
        first, second = (FleetState(one) for one in shared)
        assert (await first.hold("e", (10, 1, 1), BUDGET, ("normal", "t", 1))).ok
        # The replica has the first hold before it stops reading the primary.
        assert await shared[0].call(lambda client: client.wait(1, 10_000)) == 1
        with stopped(sentinel_group.replica.process.pid):
            # Acknowledged by the primary, never replicated (replication is
            # asynchronous): the replica, stopped, is cut off (else it would
            # read what the kernel kept for it) and the primary dies.
            await shared[0].call(lambda client: client.client_kill_filter(_type="replica"))
            assert (await second.hold("e", (6, 1, 1), BUDGET, ("normal", "u", 1))).ok
            sentinel_group.primary.kill()
        # Nothing is promoted yet: each replica finds Redis down and runs on
        # its share.
        for one in shared:
            await one.heartbeat()
            assert not one.up
        with pytest.raises(RedisError):
            await first.hold("e", (1, 1, 1), BUDGET, ("normal", "t", 1))
        await asyncio.to_thread(sentinel_group.promote)
        for one in shared:
            await one.heartbeat()
            assert one.up
        # The promoted replica had the first hold, not the second's...
        assert await first.heartbeat({"e": (10, 1, 1)}) == {"e": (10, 1, 1)}
        # ... which the second replica's heartbeat writes back.
        assert await second.heartbeat({"e": (6, 1, 1)}) == {"e": (16, 2, 2)}
        assert not (await first.hold("e", (9, 1, 1), BUDGET, ("normal", "t", 1))).ok
        assert (await first.hold("e", (8, 1, 1), BUDGET, ("normal", "t", 1))).ok
