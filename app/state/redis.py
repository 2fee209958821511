"""The gateway's connection to Redis, shared by the fleet's state and the
keys' limits.

One writer task sends, in order, what needs no answer — releases, settled
token charges — and every ``lease / 3`` seconds a heartbeat that renews this
replica's lease and writes what it holds (the truth, over whatever the
mirror says: this heals after a Redis restart or a lost write). Calls that
decide a request (hold, reserve, acquire) go straight out and wait for their
answer, bounded by ``redis_timeout``.

If Redis stops answering, ``up`` turns false (``gateway_shared_state_up``),
and the state's users fall back to this replica's share: the capacity and
limits divided by the number of replicas last seen alive. Queued writes are
dropped then — the next heartbeat writes the truth — and shared state
resumes with the first heartbeat that succeeds.
"""

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import RedisError

from app.state.address import Client, ClusterAddress, RedisAddress, connect, shown

log = logging.getLogger("gateway.state")

Write = Callable[[Client], Awaitable[Any]]


def raise_if_cancelled() -> None:
    """Re-raise a cancellation something below swallowed.

    A Redis call interrupted by a cancellation can end in a connection error
    instead of the ``CancelledError`` (the client disconnects and reports
    that), or, on Python 3.11, end as if nothing happened: redis-py sends
    through ``asyncio.wait_for``, which returns the result and drops a
    cancellation that lands as the send completes. A loop would then run
    on, and the task would never end. The task still knows it was asked to
    stop.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class SharedRedis:
    def __init__(self, address: RedisAddress, lease: float, timeout: float) -> None:
        self.client, self._close = connect(address, timeout)
        self.address = address
        # A cluster runs a script on one slot's keys only: the state's
        # users then split what spans slots into steps (app.state.fleet).
        self.clustered = isinstance(address, ClusterAddress)
        self.lease_ms = int(lease * 1000)
        self.timeout = timeout
        self.replica = uuid.uuid4().hex[:12]
        self.up = False
        self.replicas = 1
        self._writes: asyncio.Queue[Write] = asyncio.Queue()
        self._heartbeats: list[Callable[[], Awaitable[None]]] = []
        self._on_change: list[Callable[[bool], None]] = []
        self._on_close: list[Callable[[], Awaitable[None]]] = [self._close]

    def status(self) -> dict[str, Any]:
        return {
            "url": shown(self.address),
            "up": self.up,
            "replica": self.replica,
            "replicas": self.replicas,
        }

    def on_heartbeat(self, beat: Callable[[], Awaitable[None]]) -> None:
        """Run ``beat`` (which calls Redis itself) on every heartbeat."""
        self._heartbeats.append(beat)

    def on_change(self, listener: Callable[[bool], None]) -> None:
        """Told when Redis starts or stops answering."""
        self._on_change.append(listener)

    def on_close(self, close: Callable[[], Awaitable[None]]) -> None:
        """Run ``close`` (a client of the state's users) when this closes."""
        self._on_close.append(close)

    def send(self, write: Write) -> None:
        """Queue a write that needs no answer (applied in order)."""
        if self.up:
            self._writes.put_nowait(write)

    async def call(self, command: Write) -> Any:
        """A call whose answer decides something; raises ``RedisError`` (and
        marks Redis down) if it does not come in time."""
        try:
            async with asyncio.timeout(self.timeout):
                return await command(self.client)
        except (RedisError, OSError, TimeoutError) as exc:
            self.mark(False, exc)
            raise RedisError(str(exc)) from exc

    def mark(self, up: bool, why: object = None) -> None:
        if up == self.up:
            return
        self.up = up
        if up:
            log.warning("shared state in Redis: up (replica %s)", self.replica)
        else:
            log.error("shared state in Redis: DOWN (%s); falling back to this replica's share", why)
            while not self._writes.empty():
                self._writes.get_nowait()
        for listener in self._on_change:
            listener(up)

    async def run(self) -> None:
        """The writer: queued writes in order, and the heartbeat."""
        interval = self.lease_ms / 3000
        loop = asyncio.get_running_loop()
        next_beat = loop.time()
        while True:
            raise_if_cancelled()
            timeout = max(0.0, next_beat - loop.time())
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can
            # swallow a cancellation that lands as its item arrives.
            try:
                async with asyncio.timeout(timeout):
                    write = await self._writes.get()
            except TimeoutError:
                write = None
            if write is not None:
                try:
                    async with asyncio.timeout(self.timeout):
                        await write(self.client)
                except (RedisError, OSError, TimeoutError) as exc:
                    self.mark(False, exc)
                continue
            next_beat = loop.time() + interval
            await self.heartbeat()

    async def heartbeat(self) -> None:
        try:
            async with asyncio.timeout(self.timeout * (1 + len(self._heartbeats))):
                await self.client.ping()
                for beat in self._heartbeats:
                    await beat()
        except (RedisError, OSError, TimeoutError) as exc:
            self.mark(False, exc)
        else:
            self.mark(True)

    async def aclose(self) -> None:
        for close in reversed(self._on_close):
            await close()
