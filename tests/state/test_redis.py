"""Shared state in a real redis-server and a real Redis Cluster: holds that
never overbook an engine, leases that expire, settleable token limits,
slots, and what happens when Redis stops answering."""

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator

import pytest

from app.admission.controller import AdmissionController
from app.admission.estimate import PromptTokenEstimator
from app.observe.metrics import GatewayMetrics
from app.routing.setup import build_router
from app.settings import Settings
from app.state.fleet import FleetState
from app.state.local import LocalLimits
from app.state.redis import SharedRedis
from app.state.redis_limits import RedisLimits, SharedLimits
from tests.support.redis_cluster import RedisClusterNodes
from tests.support.redis_server import RedisServer, replicas_of
from tests.support.wait import wait_for


@pytest.fixture
async def replicas(
    redis_store: RedisServer | RedisClusterNodes,
) -> AsyncIterator[list[SharedRedis]]:
    # A lease no test outlasts, however busy the machine: nothing here
    # renews it, and a replica whose lease ran out stops counting.
    async with replicas_of(redis_store, 2, lease=120.0) as shared:
        yield shared


async def test_two_replicas_deciding_at_once_never_overbook_an_engine(
    replicas: list[SharedRedis],
) -> None:
    fleets = [FleetState(one) for one in replicas]
    # Each replica asks for 3 blocks at a time, 20 times, all at once, on an
    # engine with a budget of 24 blocks: at most 8 holds can succeed.
    answers = await asyncio.gather(
        *(
            fleet.hold("e", (3, 1, 1), (24, 100), ("normal", "t", 10))
            for fleet in fleets
            for _ in range(20)
        )
    )
    assert sum(a.ok for a in answers) == 8
    totals = await fleets[0].heartbeat({"e": (0, 0, 0)})
    held_by_second = sum(a.ok for a in answers[20:])
    assert totals["e"][0] == 3 * held_by_second


async def test_a_release_still_queued_when_a_heartbeat_writes_comes_off_once(
    replicas: list[SharedRedis],
) -> None:
    first, second = (FleetState(one) for one in replicas)
    assert (await first.hold("e", (10, 1, 1), (24, 100), ("normal", "t", 1))).ok
    # The request ends: this replica now holds nothing there, and the
    # release waits in the writer's queue (the writer is not running yet)
    # when a heartbeat writes what the replica holds.
    first.release("e", (10, 1, 1))
    assert await first.heartbeat({"e": (0, 0, 0)}) == {"e": (10, 1, 1)}
    writer = asyncio.create_task(replicas[0].run())
    try:
        # Then the release is applied: it comes off once, not twice (which
        # would leave the fleet counting less than the engine holds).
        assert (await first.hold("e", (6, 1, 1), (24, 100), ("normal", "t", 1))).ok

        async def settled() -> bool:
            return (await second.heartbeat({"e": (0, 0, 0)}))["e"] == (6, 1, 1)

        assert await wait_for(settled, timeout=30)
        # And what it gave back is no longer added to what it holds.
        assert await first.heartbeat({"e": (6, 1, 1)}) == {"e": (6, 1, 1)}
    finally:
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer


async def test_a_replica_that_stops_renewing_its_lease_stops_counting(
    redis_store: RedisServer | RedisClusterNodes,
) -> None:
    async with replicas_of(redis_store, 2, lease=1.0) as replicas:
        first, second = (FleetState(one) for one in replicas)
        assert (await first.hold("e", (20, 1, 1), (24, 100), ("normal", "t", 1))).ok
        assert not (await second.hold("e", (10, 1, 1), (24, 100), ("normal", "t", 1))).ok

        # The first replica dies: nothing renews its lease (1 s); the second
        # renews its own, and the first's holdings stop counting.
        async def first_forgotten() -> bool:
            return (await second.heartbeat({"e": (0, 0, 0)}))["e"] == (0, 0, 0)

        assert await wait_for(first_forgotten, timeout=30)
        assert (await second.hold("e", (10, 1, 1), (24, 100), ("normal", "t", 1))).ok


async def test_the_fair_share_clock_is_the_fleets(replicas: list[SharedRedis]) -> None:
    first, second = (FleetState(one) for one in replicas)
    await first.hold("e", (1, 1, 1), (100, 100), ("normal", "heavy", 500))
    await second.hold("e", (1, 1, 1), (100, 100), ("normal", "heavy", 500))
    clocks = await first.clocks({"normal": ["heavy", "light"]})
    served, vtime = clocks["normal"]
    assert served == {"heavy": 1000.0}
    assert vtime == 500.0


async def test_token_limits_are_shared_and_settle(replicas: list[SharedRedis]) -> None:
    first, second = (RedisLimits(one) for one in replicas)
    assert (await first.reserve_tokens("k", "a", 600, 600, 1000, 60)).allowed
    refused = await second.reserve_tokens("k", "b", 500, 500, 1000, 60)
    assert not refused.allowed
    assert refused.remaining == 400
    assert 0 < refused.retry_after <= 60
    first.settle_tokens("k", "a", 100)
    writer = asyncio.create_task(replicas[0].run())
    try:
        for _ in range(100):
            if (await second.reserve_tokens("k", "b", 500, 500, 1000, 60)).allowed:
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the settle never reached Redis")
    finally:
        writer.cancel()


async def written(shared: SharedRedis) -> None:
    """Apply the writes ``shared`` has queued, in order (what its writer
    task does), so what follows reads them."""
    while not shared._writes.empty():
        await shared._writes.get_nowait()(shared.client)


async def test_tokens_are_charged_in_redis_as_in_process(replicas: list[SharedRedis]) -> None:
    """The same requests, estimates and settles through two replicas
    sharing Redis and through one in-process store: the same answers, the
    same charges (between estimate and worst case: ``app.keys.quota``)."""
    rng = random.Random(3)
    local = LocalLimits(lambda: 1000.0)
    in_redis = [RedisLimits(one) for one in replicas]
    running: list[tuple[int, str, int]] = []  # replica, charge, what it will use
    answers: dict[str, list[tuple[bool, int, int]]] = {"local": [], "redis": []}
    kinds = dict.fromkeys(("refused", "estimate", "worst", "U"), 0)
    for i in range(120):
        if running and rng.random() < 0.4:
            replica, charge, used = running.pop(rng.randrange(len(running)))
            local.settle_tokens("k", charge, used)
            in_redis[replica].settle_tokens("k", charge, used)
            await written(replicas[replica])
            continue
        worst = rng.choice((40, 100, 250))
        estimate, replica, charge = rng.randint(1, worst), i % 2, f"c{i}"
        for name, store in (("local", local), ("redis", in_redis[replica])):
            verdict = await store.reserve_tokens("k", charge, estimate, worst, 1500, 60)
            answers[name].append((verdict.allowed, verdict.charged, verdict.remaining))
        allowed, charged, _ = answers["local"][-1]
        if allowed:
            running.append((replica, charge, rng.randint(0, worst // 4)))
        kinds[
            "refused" if not allowed else {estimate: "estimate", worst: "worst"}.get(charged, "U")
        ] += 1
    assert answers["redis"] == answers["local"]
    # Each part of the rule ran: refusals, charges of the estimate, of the
    # worst case, and of the unreserved tokens between them.
    assert min(kinds.values()) >= 5, kinds


async def test_a_charge_leaving_the_window_in_redis_leaves_nothing_unreserved(
    replicas: list[SharedRedis],
) -> None:
    limits = RedisLimits(replicas[0])
    loop = asyncio.get_running_loop()
    first = loop.time()
    assert (await limits.reserve_tokens("k", "a", 10, 100, 1000, 4)).charged == 10
    await asyncio.sleep(2.5)
    # "b" is charged its worst case (90 unreserved is more than its
    # estimate), and keeps the key's log in Redis alive past "a".
    assert (await limits.reserve_tokens("k", "b", 10, 50, 1000, 4)).charged == 50
    # "a" out of the window (4 s, on Redis's clock), never settled; "b" in it.
    await asyncio.sleep(max(0.0, first + 4.1 - loop.time()))
    assert (await limits.reserve_tokens("k", "c", 10, 100, 1000, 4)).charged == 10


async def test_requests_per_window_and_slots_are_shared(replicas: list[SharedRedis]) -> None:
    first, second = (RedisLimits(one) for one in replicas)
    verdicts = [await lim.hit_requests("k", 3, 60) for lim in (first, second, first, second)]
    assert [v.allowed for v in verdicts] == [True, True, True, False]
    assert await first.acquire_slot("k", 1)
    assert not await second.acquire_slot("k", 1)


async def test_with_redis_down_each_replica_keeps_to_its_share(redis: RedisServer) -> None:
    async with replicas_of(redis, 1, lease=120.0) as (first,):
        await _keeps_to_its_share(redis, first)


async def _keeps_to_its_share(redis: RedisServer, first: SharedRedis) -> None:
    FleetState(first)  # registers nothing; the replica count comes from the fleet
    first.replicas = 2
    limits = SharedLimits(first)
    redis.stop()
    await first.heartbeat()
    assert not first.up
    # Half of 1000 for this replica, kept in process.
    assert (await limits.reserve_tokens("k", "a", 500, 500, 1000, 60)).allowed
    assert not (await limits.reserve_tokens("k", "b", 1, 1, 1000, 60)).allowed
    redis.start()
    await first.heartbeat()
    assert first.up


async def test_a_replica_waits_its_turn_behind_a_tenant_waiting_at_another(
    replicas: list[SharedRedis],
) -> None:
    first, second = (FleetState(one) for one in replicas)
    # "heavy" has been served 500 tokens; "light" nothing yet.
    assert (await second.hold("e", (1, 1, 1), (100, 100), ("normal", "heavy", 500))).ok
    # The first replica (alive: its lease renewed) has "light" waiting,
    # behind "heavy" in its own (lagging) copy of the clocks.
    await first.heartbeat({})
    await first.publish({"normal": ["heavy", "light"]})
    turn = await second.hold("e", (1, 1, 1), (100, 100), ("normal", "heavy", 10))
    assert turn.not_my_turn
    assert not turn.ok
    assert (await first.hold("e", (1, 1, 1), (100, 100), ("normal", "light", 10))).ok
    # A request waiting in a higher class goes before any normal request.
    await first.publish({"high": ["vip"], "normal": []})
    assert (await second.hold("e", (1, 1, 1), (100, 100), ("normal", "heavy", 10))).not_my_turn
    assert (await second.hold("e", (1, 1, 1), (100, 100), ("high", "other", 10))).ok


async def test_a_replica_whose_copy_of_the_clocks_lags_is_told_the_fleets(
    replicas: list[SharedRedis],
) -> None:
    first, second = (FleetState(one) for one in replicas)
    # The second replica admitted 500 of "heavy"'s tokens; the first still
    # thinks "heavy" is behind "light" and asks for "heavy" with "light"
    # waiting beside it.
    assert (await second.hold("e", (1, 1, 1), (100, 100), ("normal", "heavy", 500))).ok
    turn = await first.hold("e", (1, 1, 1), (100, 100), ("normal", "heavy", 10), ["light"])
    assert not turn.ok
    assert not turn.not_my_turn
    assert turn.starts == {"heavy": 500.0, "light": 0.0}
    # Nothing was held or charged for the refused request.
    assert (await first.hold("e", (1, 1, 1), (100, 100), ("normal", "light", 10), ["heavy"])).ok
    again = await first.hold("e", (1, 1, 1), (100, 100), ("normal", "light", 10), ["heavy"])
    assert again.ok
    assert again.served == 20.0


async def test_a_hold_refused_for_room_leaves_its_tenants_clock_as_it_was(
    replicas: list[SharedRedis],
) -> None:
    """On a cluster the turn and the charge come before the room, in
    another slot: a refusal there undoes the charge. The request goes back
    to the front of its queue as if never tried."""
    first, second = (FleetState(one) for one in replicas)
    assert (await second.hold("e", (20, 1, 1), (24, 100), ("normal", "other", 100))).ok
    assert (await first.hold("e", (2, 1, 1), (24, 100), ("normal", "t", 50))).ok
    before = await first.clocks({"normal": ["t", "other"]})
    refused = await first.hold("e", (10, 1, 1), (24, 100), ("normal", "t", 400))
    assert not refused.ok
    assert not refused.not_my_turn
    # The fleet's totals on the engine, for the replica's view.
    assert (refused.blocks, refused.requests) == (22, 2)
    assert await first.clocks({"normal": ["t", "other"]}) == before
    # Still first in the fair order: another replica's "other" (clock 100)
    # waits behind "t" (clock 50).
    await second.heartbeat({})
    await second.publish({"normal": ["other"]})
    assert (await first.hold("e", (2, 1, 1), (24, 100), ("normal", "t", 10))).ok


async def test_replicas_sharing_state_do_not_pace_starts(replicas: list[SharedRedis]) -> None:
    """Paced starts (``app.admission.pace``) need every start on an engine in
    sight; a replica sharing state through Redis does not see the others'."""
    settings = Settings(upstream_url="http://127.0.0.1:9")
    alone = AdmissionController(
        settings, GatewayMetrics(), PromptTokenEstimator(), build_router(settings, {})
    )
    assert alone.policy.config.budget.paced_starts
    shared = AdmissionController(
        settings,
        GatewayMetrics(),
        PromptTokenEstimator(),
        build_router(settings, {}),
        FleetState(replicas[0]),
    )
    assert not shared.policy.config.budget.paced_starts
