"""The keys' limits in Redis, shared by every gateway replica, and what
happens when Redis does not answer.

Requests per window use the ``limits`` library's moving window on Redis
storage; tokens use the same settleable log and reservation rule as in
process, as one server-side script (``scripts.RESERVE_TOKENS``: the log and
the key's unreserved tokens change together); concurrent slots are counted
per replica under the replica's lease, so a replica that dies gives its
slots back when its lease runs out. With Redis down, each replica enforces its
share of every limit (the limit divided by the replicas last seen alive) in
process, so the fleet as a whole stays within it.
"""

import asyncio
import math
import time
from urllib.parse import urlsplit

from limits import RateLimitItemPerSecond
from limits.aio.storage import RedisClusterStorage, RedisStorage
from limits.aio.strategies import MovingWindowRateLimiter
from redis.exceptions import RedisError

from app.state import layout
from app.state import limit_scripts as scripts
from app.state.address import ClusterAddress
from app.state.base import SlotCounts, Verdict
from app.state.local import LocalLimits
from app.state.redis import SharedRedis


class RedisLimits:
    def __init__(self, shared: SharedRedis) -> None:
        self._shared = shared
        self._requests = MovingWindowRateLimiter(_window_storage(shared))
        client = shared.client
        self._reserve = client.register_script(scripts.RESERVE_TOKENS)
        self._settle = client.register_script(scripts.SETTLE_TOKENS)
        self._acquire = client.register_script(scripts.ACQUIRE_SLOT)
        self._set_slots = client.register_script(scripts.SET_SLOTS)
        # This replica's slots per key: the truth its heartbeat writes.
        self._slots = SlotCounts()
        shared.on_heartbeat(self._beat)

    async def hit_requests(self, key: str, limit: int, window: int) -> Verdict:
        item = RateLimitItemPerSecond(limit, window)
        # The key's hash tag in the window's name: on the key's slot.
        tagged = layout.requests(key)

        async def hit(_: object) -> tuple[bool, float, int]:
            allowed = await self._requests.hit(item, tagged)
            stats = await self._requests.get_window_stats(item, tagged)
            return allowed, stats.reset_time, stats.remaining

        allowed, reset_time, remaining = await self._shared.call(hit)
        reset = max(0.0, reset_time - time.time())
        return Verdict(allowed, limit, remaining, reset, 0.0 if allowed else reset)

    async def reserve_tokens(
        self, key: str, charge: str, estimate: int, worst: int, limit: int, window: int
    ) -> Verdict:
        keys = layout.tokens(key)
        args: list[str | int] = [charge, estimate, worst, limit, window * 1000]
        allowed, total, wait_ms, reset_ms, charged = await self._shared.call(
            lambda _: self._reserve(keys=keys, args=args)
        )
        total = int(total) + int(charged)
        return Verdict(
            bool(allowed),
            limit,
            max(0, limit - total),
            int(reset_ms) / 1000,
            int(wait_ms) / 1000,
            charged=int(charged),
        )

    def settle_tokens(self, key: str, charge: str, tokens: int) -> None:
        keys = layout.tokens(key)[1:]

        async def write(_: object) -> None:
            await self._settle(keys=keys, args=[charge, tokens])

        self._shared.send(write)

    async def acquire_slot(self, key: str, limit: int) -> bool:
        shared = self._shared
        # Counted here first: a heartbeat while Redis answers writes it too.
        self._slots.take(key)
        try:
            args: list[str | int] = [shared.replica, limit, shared.lease_ms]
            taken = bool(
                await shared.call(lambda _: self._acquire(keys=layout.slots(key), args=args))
            )
        except RedisError:
            self.release_slot(key)
            raise
        if not taken:
            self._slots.give_back(key)
        return taken

    def release_slot(self, key: str) -> None:
        held = self._slots.give_back(key)

        async def write(_: object) -> None:
            await self._write_slots({key: held})

        self._shared.send(write)

    async def _beat(self) -> None:
        if self._slots:
            await self._write_slots(self._slots)

    async def _write_slots(self, held: dict[str, int]) -> None:
        """Write what this replica holds of each key's slots (the truth)."""
        shared = self._shared
        # One script per key: each key's slots are in the key's slot.
        await asyncio.gather(
            *(
                self._set_slots(keys=layout.slots(key), args=[shared.replica, shared.lease_ms, n])
                for key, n in held.items()
            )
        )


def _window_storage(shared: SharedRedis) -> RedisStorage:
    """``limits``' storage for the requests per window, in the shared Redis.

    On the gateway's own connection pool where there is one (a URL's Redis
    or Sentinel's primary; the URI then only names the implementation): one
    pool, closed with it, which knows where Redis is. A cluster's client
    keeps a pool per node, which ``limits`` cannot be given: it gets a
    client of its own from the same node, closed with the gateway's."""
    prefix = "gw:requests"
    address = shared.address
    if isinstance(address, ClusterAddress):
        parts = urlsplit(address.url)
        auth = f":{parts.password}@" if parts.password else ""
        node = f"{parts.hostname}:{parts.port or 6379}"
        storage = RedisClusterStorage(
            f"async+redis+cluster://{auth}{node}",
            implementation="redispy",
            key_prefix=prefix,
            socket_timeout=shared.timeout,
            socket_connect_timeout=shared.timeout,
        )
        # (The redis-py bridge's client: ``implementation="redispy"``.)
        client = storage.bridge.get_connection()  # type: ignore[attr-defined]
        shared.on_close(client.aclose)
        return storage
    return RedisStorage(
        "async+redis://",
        implementation="redispy",
        key_prefix=prefix,
        # The storage passes its options on to redis-py (typed loosely).
        connection_pool=shared.client.connection_pool,  # type: ignore[arg-type,union-attr]
    )


class SharedLimits:
    """The limits in Redis while it answers; this replica's share of each
    limit, in process, while it does not."""

    def __init__(self, shared: SharedRedis) -> None:
        self._shared = shared
        self._redis = RedisLimits(shared)
        self._local = LocalLimits()
        # Slots taken in Redis per key; the rest were taken in process.
        self._in_redis: dict[str, int] = {}

    def _share(self, limit: int) -> int:
        return max(1, math.floor(limit / self._shared.replicas))

    async def hit_requests(self, key: str, limit: int, window: int) -> Verdict:
        if self._shared.up:
            try:
                return await self._redis.hit_requests(key, limit, window)
            except RedisError:
                pass
        return await self._local.hit_requests(key, self._share(limit), window)

    async def reserve_tokens(
        self, key: str, charge: str, estimate: int, worst: int, limit: int, window: int
    ) -> Verdict:
        if self._shared.up:
            try:
                return await self._redis.reserve_tokens(key, charge, estimate, worst, limit, window)
            except RedisError:
                pass
        share = self._share(limit)
        return await self._local.reserve_tokens(key, charge, estimate, worst, share, window)

    def settle_tokens(self, key: str, charge: str, tokens: int) -> None:
        # A charge lives where it was made; settling the other store is a no-op.
        self._redis.settle_tokens(key, charge, tokens)
        self._local.settle_tokens(key, charge, tokens)

    async def acquire_slot(self, key: str, limit: int) -> bool:
        if self._shared.up:
            try:
                taken = await self._redis.acquire_slot(key, limit)
            except RedisError:
                pass
            else:
                if taken:
                    self._in_redis[key] = self._in_redis.get(key, 0) + 1
                return taken
        return await self._local.acquire_slot(key, self._share(limit))

    def release_slot(self, key: str) -> None:
        in_redis = self._in_redis.get(key, 0)
        if in_redis:
            self._in_redis[key] = in_redis - 1
            self._redis.release_slot(key)
        else:
            self._local.release_slot(key)
