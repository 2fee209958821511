"""Shared state whose cost does not grow with the fleet, in a real
redis-server (and what is not about counting commands, on a real Redis
Cluster too): an admission and a heartbeat run as many commands in Redis at
48 live replicas as at 4; a dead replica's holdings and waiting tenants come
back on the admission path itself, and a replica that was only slow counts
again, whole; giving back never takes what the others hold; a tenant
waiting at several replicas waits until none has it."""

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis

from app.state.fleet import FleetState
from app.state.redis import SharedRedis
from app.state.redis_limits import RedisLimits
from tests.support.redis_cluster import RedisClusterNodes
from tests.support.redis_server import RedisServer, replicas_of
from tests.support.wait import wait_for

# A lease no test outlasts unless it waits for one to run out.
LONG = 120.0


# A MONITOR line's arguments, each in double quotes (escaped inside).
ARGUMENT = re.compile(r'"((?:[^"\\]|\\.)*)"')


async def commands_run(
    redis: RedisServer, call: Callable[[], Awaitable[Any]]
) -> list[tuple[str, int]]:
    """What Redis ran for ``call``: the script and every command it ran
    inside, each as its name and number of arguments (MONITOR). A loop over
    the live replicas shows as more commands, a read of each of their
    fields as more arguments."""
    reader, writer = await asyncio.open_connection("127.0.0.1", redis.port)
    writer.write(b"MONITOR\r\n")
    assert (await reader.readline()).startswith(b"+OK")
    try:
        await call()
        async with aioredis.Redis.from_url(redis.url) as control:
            await control.echo("that was all")
        ran: list[tuple[str, int]] = []
        while True:
            line = (await reader.readline()).decode()
            args = ARGUMENT.findall(line)
            if args == ["ECHO", "that was all"]:
                return ran
            if " lua] " in line or args[0] in ("EVALSHA", "EVAL"):
                ran.append((args[0], len(args)))
    finally:
        writer.close()
        await writer.wait_closed()


async def redis_flushed(redis: RedisServer) -> None:
    async with aioredis.Redis.from_url(redis.url) as control:
        await control.flushall()


async def a_busy_fleet(replicas: list[SharedRedis], engines: list[str]) -> list[FleetState]:
    """Every replica holding on every engine, with two tenants waiting at it
    whose clocks are far ahead (so every admission runs the whole check)."""
    fleets = [FleetState(one) for one in replicas]
    for n, fleet in enumerate(fleets):
        waiting = [f"waiting-{n}-a", f"waiting-{n}-b"]
        for tenant in waiting:
            assert (
                await fleet.hold(engines[0], (0, 0, 1), (None, 10**9), ("normal", tenant, 10**9))
            ).ok
        await fleet.heartbeat({e: (4, 1, 1) for e in engines})
        await fleet.publish({"normal": waiting})
    return fleets


async def admission_cost(redis: RedisServer, size: int) -> list[tuple[str, int]]:
    """The commands one admission runs in Redis in a busy fleet of ``size``."""
    async with replicas_of(redis, size, LONG) as replicas:
        first = (await a_busy_fleet(replicas, ["e"]))[0]

        async def admit() -> None:
            held = await first.hold(
                "e", (4, 1, 1), (None, 10**9), ("normal", "t", 10), ["waiting-0-a"]
            )
            assert held.ok

        await admit()  # the script loaded, the tenant's clock ahead of the class's
        return await commands_run(redis, admit)


async def heartbeat_cost(redis: RedisServer, size: int) -> list[tuple[str, int]]:
    """The commands one heartbeat over three engines runs in Redis in a busy
    fleet of ``size``."""
    engines = ["e1", "e2", "e3"]
    async with replicas_of(redis, size, LONG) as replicas:
        first = (await a_busy_fleet(replicas, engines))[0]

        async def beat() -> None:
            assert await first.heartbeat({e: (4, 1, 1) for e in engines})

        return await commands_run(redis, beat)


async def test_an_admission_runs_as_many_redis_commands_at_48_replicas_as_at_4(
    redis: RedisServer,
) -> None:
    small = await admission_cost(redis, 4)
    await redis_flushed(redis)
    assert await admission_cost(redis, 48) == small


async def test_a_heartbeat_runs_as_many_redis_commands_at_48_replicas_as_at_4(
    redis: RedisServer,
) -> None:
    small = await heartbeat_cost(redis, 4)
    await redis_flushed(redis)
    assert await heartbeat_cost(redis, 48) == small


# What writes in Redis, of what a script runs.
WRITES = {"HSET", "HDEL", "HINCRBY", "ZADD", "ZREM"}


def writes(ran: list[tuple[str, int]]) -> list[tuple[str, int]]:
    return [(name, args) for name, args in ran if name.upper() in WRITES]


async def test_a_heartbeat_writes_only_where_the_replica_holds_something(
    redis: RedisServer,
) -> None:
    """Beside the engine it holds on, 63 it holds nothing on: the heartbeat
    writes as it does with that one engine alone (it reads the others)."""
    async with replicas_of(redis, 2, LONG) as replicas:
        first, second = (FleetState(one) for one in replicas)
        assert (await second.hold("e63", (5, 1, 1), (None, 100), ("normal", "t", 1))).ok
        assert (await first.hold("e0", (4, 1, 1), (None, 100), ("normal", "t", 1))).ok
        alone = await commands_run(redis, lambda: first.heartbeat({"e0": (4, 1, 1)}))
        fleet = {f"e{i}": (0, 0, 0) for i in range(64)} | {"e0": (4, 1, 1)}
        totals: dict[str, tuple[int, int, int]] = {}

        async def beat() -> None:
            totals.update(await first.heartbeat(fleet))

        beside = await commands_run(redis, beat)
        assert writes(beside) == writes(alone)
        # What it does not write, it reads: the others' holdings too.
        assert totals["e63"] == (5, 1, 1)
        assert totals["e0"] == (4, 1, 1)


async def test_what_a_replica_held_is_written_off_once_then_only_read(
    redis: RedisServer,
) -> None:
    async with replicas_of(redis, 2, LONG) as replicas:
        first, second = (FleetState(one) for one in replicas)
        assert (await first.hold("e", (10, 1, 1), (None, 100), ("normal", "t", 1))).ok
        # It gave the blocks back and Redis was not told (a release lost):
        # the heartbeat writes that it holds nothing there.
        assert (await first.heartbeat({"e": (0, 0, 0)}))["e"] == (0, 0, 0)
        assert (await second.hold("e", (0, 0, 0), (None, 100), ("normal", "t", 0))).blocks == 0
        # Then nothing of it is in Redis: the next only reads.
        again = await commands_run(redis, lambda: first.heartbeat({"e": (0, 0, 0)}))
        nothing = await commands_run(redis, lambda: first.heartbeat({}))
        assert writes(again) == writes(nothing)


async def test_a_dead_replicas_holdings_come_back_in_a_heartbeat_that_only_reads(
    redis_store: RedisServer | RedisClusterNodes,
) -> None:
    async with replicas_of(redis_store, 2, lease=1.0) as replicas:
        first, second = (FleetState(one) for one in replicas)
        assert (await first.hold("e", (20, 1, 1), (24, 100), ("normal", "t", 1))).ok

        # The first replica dies; the second holds nothing on the engine, so
        # its heartbeats only read it: they take the dead one's part out.
        async def gone() -> bool:
            return (await second.heartbeat({"e": (0, 0, 0)}))["e"] == (0, 0, 0)

        assert not await gone()
        assert await wait_for(gone, timeout=30)


async def test_a_dead_replicas_holdings_come_back_on_the_admission_path(
    redis_store: RedisServer | RedisClusterNodes,
) -> None:
    async with replicas_of(redis_store, 2, lease=1.0) as replicas:
        first, second = (FleetState(one) for one in replicas)
        assert (await first.hold("e", (20, 1, 1), (24, 100), ("normal", "t", 1))).ok

        # The first replica dies; nobody heart-beats: only the second's
        # admissions find its lease run out.
        async def fits() -> bool:
            return (await second.hold("e", (10, 1, 1), (24, 100), ("normal", "t", 1))).ok

        assert not await fits()
        assert await wait_for(fits, timeout=30)


async def test_a_replica_that_was_only_slow_counts_again_whole(
    redis_store: RedisServer | RedisClusterNodes,
) -> None:
    async with replicas_of(redis_store, 2, lease=1.0) as replicas:
        first, second = (FleetState(one) for one in replicas)
        assert (await first.hold("e", (20, 1, 1), (24, 100), ("normal", "t", 1))).ok

        async def taken_back() -> bool:
            return (await second.hold("e", (5, 1, 1), (24, 100), ("normal", "t", 1))).ok

        assert not await taken_back()
        assert await wait_for(taken_back, timeout=30)
        # The first replica was slow, not dead: its next admission renews
        # its lease and its 20 blocks count again beside the second's 5.
        again = await first.hold("e", (1, 1, 1), (24, 100), ("normal", "t", 1))
        assert not again.ok
        assert again.blocks == 25


async def test_giving_back_more_than_was_held_never_takes_what_others_hold(
    redis_store: RedisServer | RedisClusterNodes,
) -> None:
    async with replicas_of(redis_store, 2, LONG) as replicas:
        first, second = (FleetState(one) for one in replicas)
        assert (await first.hold("e", (10, 1, 1), (100, 100), ("normal", "t", 1))).ok
        assert (await second.hold("e", (6, 1, 1), (100, 100), ("normal", "t", 1))).ok
        writer = asyncio.create_task(replicas[0].run())
        try:
            # The same release twice (a duplicate), sent on in order.
            first.release("e", (10, 1, 1))
            first.release("e", (10, 1, 1))

            async def only_the_seconds_left() -> bool:
                held = await second.hold("e", (0, 0, 0), (100, 100), ("normal", "t", 0))
                return (held.blocks, held.sequences) == (6, 1)

            assert await wait_for(only_the_seconds_left, timeout=30)
            # Not below it either, after the duplicate.
            held = await second.hold("e", (0, 0, 0), (100, 100), ("normal", "t", 0))
            assert held.blocks == 6
        finally:
            writer.cancel()


async def test_a_tenant_published_only_here_does_not_make_this_replica_wait(
    redis_store: RedisServer | RedisClusterNodes,
) -> None:
    async with replicas_of(redis_store, 2, LONG) as replicas:
        first, second = (FleetState(one) for one in replicas)
        assert (await first.hold("e", (1, 1, 1), (100, 100), ("normal", "heavy", 500))).ok
        # "light" (clock 0) is published as waiting at the first replica: it
        # makes the second wait, not the first (its own list may lag its queue).
        await first.publish({"normal": ["light"]})
        assert (await second.hold("e", (1, 1, 1), (100, 100), ("normal", "heavy", 10))).not_my_turn
        assert (await first.hold("e", (1, 1, 1), (100, 100), ("normal", "heavy", 10))).ok


async def test_a_tenant_waiting_at_two_replicas_waits_until_neither_has_it(
    redis_store: RedisServer | RedisClusterNodes,
) -> None:
    async with replicas_of(redis_store, 3, LONG) as replicas:
        first, second, third = (FleetState(one) for one in replicas)
        assert (await third.hold("e", (1, 1, 1), (100, 100), ("normal", "heavy", 500))).ok
        await first.publish({"normal": ["light"]})
        await second.publish({"normal": ["light"]})
        await first.publish({"normal": []})
        # Still waiting at the second replica: it goes first.
        heavy = ("normal", "heavy", 10)
        assert (await third.hold("e", (1, 1, 1), (100, 100), heavy)).not_my_turn
        await second.publish({"normal": []})
        assert (await third.hold("e", (1, 1, 1), (100, 100), heavy)).ok


async def test_a_dead_replicas_waiting_tenants_stop_counting_on_the_admission_path(
    redis_store: RedisServer | RedisClusterNodes,
) -> None:
    async with replicas_of(redis_store, 2, lease=1.0) as replicas:
        first, second = (FleetState(one) for one in replicas)
        assert (await second.hold("e", (1, 1, 1), (100, 100), ("normal", "heavy", 500))).ok
        await first.publish({"normal": ["light"]})
        heavy = ("normal", "heavy", 10)
        assert (await second.hold("e", (1, 1, 1), (100, 100), heavy)).not_my_turn

        # The first replica dies with "light" waiting there.
        async def admitted() -> bool:
            return (await second.hold("e", (1, 1, 1), (100, 100), heavy)).ok

        assert await wait_for(admitted, timeout=30)


async def test_a_dead_replicas_slots_come_back_when_a_slot_is_asked_for(
    redis_store: RedisServer | RedisClusterNodes,
) -> None:
    async with replicas_of(redis_store, 2, lease=1.0) as replicas:
        first, second = (RedisLimits(one) for one in replicas)
        assert await first.acquire_slot("k", 1)

        async def acquired() -> bool:
            return await second.acquire_slot("k", 1)

        assert not await acquired()
        assert await wait_for(acquired, timeout=30)
