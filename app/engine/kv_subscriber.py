"""One engine's KV cache events (``app.engine.kv_events``): subscribed to,
kept in order, applied to the engine's ``BlockIndex`` (what its prefix cache
holds, for routing).

PUB/SUB drops what a slow or absent subscriber misses, so the index is
trusted (``live``) only while batches arrive in sequence:

- on every connection (the first, or again after the engine restarted or
  the network failed) it is synced first: the replay from the last batch
  applied shows whether this is the same engine's stream — that batch, the
  same bytes — and fills what was missed; otherwise (a restarted engine, a
  buffer that no longer reaches back so far) the index is rebuilt from
  what the replay still holds from the start;
- a gap in the sequence is filled from the replay the same way;
- while disconnected, syncing, or when a sync failed (retried every few
  seconds), it is not live, and routing falls back to the prompt's
  approximate key (``gateway_kv_events_up`` 0).

Without a replay endpoint nothing can be filled: a connection or a gap
starts the index afresh from the next batch (it then misses what was
cached before, so it under-counts until that is evicted or used again).
ZeroMQ heartbeats on the connection notice an engine that vanished without
closing it.
"""

import asyncio
import logging
import time
from contextlib import suppress

import msgspec
import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from app.engine.kv_events import apply
from app.observe.metrics import GatewayMetrics
from app.routing.block_index import BlockIndex

log = logging.getLogger("gateway.engine")

_END = -1
# Seconds to wait for each frame of a replay; a failed sync is retried after
# _RETRY seconds, or at the next batch.
_REPLAY_TIMEOUT = 5.0
_RETRY = 5.0


class KvEventSubscriber:
    def __init__(
        self,
        label: str,
        endpoint: str,
        replay_endpoint: str | None,
        index: BlockIndex,
        metrics: GatewayMetrics,
        context: zmq.asyncio.Context,
        replay_timeout: float = _REPLAY_TIMEOUT,
    ) -> None:
        self.label = label
        self.endpoint = endpoint
        self.replay_endpoint = replay_endpoint
        self.index = index
        self._context = context
        self._replay_timeout = replay_timeout
        # The last batch applied: its sequence number and bytes.
        self._last: int | None = None
        self._last_payload = b""
        self._connected = False
        self._synced = False
        # A sync that failed is tried again from then on.
        self._retry_at = 0.0
        self._up = metrics.kv_events_up.labels(label)
        self._held = metrics.kv_blocks_held.labels(label)
        self._gaps = metrics.kv_event_gaps.labels(label)
        self._up.set(0)

    async def run(self) -> None:
        sub = _socket(self._context, zmq.SUB, self.endpoint)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.setsockopt(zmq.RCVHWM, 100_000)
        sub.setsockopt(zmq.HEARTBEAT_IVL, 2_000)
        sub.setsockopt(zmq.HEARTBEAT_TIMEOUT, 6_000)
        sub.setsockopt(zmq.RECONNECT_IVL, 500)
        sub.setsockopt(zmq.RECONNECT_IVL_MAX, 5_000)
        monitor = sub.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        sub.connect(self.endpoint)
        poller = zmq.asyncio.Poller()
        poller.register(monitor, zmq.POLLIN)
        poller.register(sub, zmq.POLLIN)
        try:
            while True:
                ready = dict(await poller.poll(_RETRY * 1000))
                if monitor in ready:
                    await self._on_connection(monitor)
                if sub in ready:
                    await self._on_batches(sub)
                if self._connected and not self._synced and time.monotonic() >= self._retry_at:
                    await self._sync()
                self._show()
        finally:
            self._live(False)
            with suppress(zmq.ZMQError):
                sub.disable_monitor()
            monitor.close(linger=0)
            sub.close(linger=0)

    async def _on_connection(self, monitor: zmq.asyncio.Socket) -> None:
        while True:
            try:
                frames = await monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            event = parse_monitor_message(frames)["event"]
            if event == zmq.EVENT_CONNECTED:
                log.info("engine %s: KV events connected (%s)", self.label, self.endpoint)
                self._connected = True
                # Whatever was missed, or a restarted engine: synced again.
                self._synced = False
                await self._sync()
            elif event == zmq.EVENT_DISCONNECTED:
                if self._connected:
                    log.warning("engine %s: KV events disconnected", self.label)
                self._connected = False
                self._live(False)

    async def _on_batches(self, sub: zmq.asyncio.Socket) -> None:
        while True:
            try:
                _, seq_bytes, payload = await sub.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            except ValueError:
                continue  # not three frames: not a batch
            if not self._synced:
                continue  # syncing (or retrying a sync): the replay brings it
            seq = int.from_bytes(seq_bytes, "big", signed=True)
            last = self._last
            if last is not None and seq <= last:
                continue  # had it from a replay already
            if last is None or seq == last + 1:
                self._apply(seq, payload)
                continue
            self._gaps.inc()
            log.warning(
                "engine %s: KV events %d to %d missed; filling the gap",
                self.label,
                last + 1,
                seq - 1,
            )
            if self.replay_endpoint is None:
                self._start_afresh()
                self._apply(seq, payload)
                continue
            self._synced = False
            await self._sync()

    async def _sync(self) -> None:
        """Make the index match the engine's stream again (see the module)."""
        self._live(False)
        self._retry_at = time.monotonic() + _RETRY
        if self.replay_endpoint is None:
            self._start_afresh()
            self._synced = True
            self._live(True)
            return
        if self._last is not None:
            batches = await self._replay(self._last)
            if batches is None:
                return
            if batches and batches[0] == (self._last, self._last_payload):
                for seq, payload in batches[1:]:
                    self._apply(seq, payload)
                self._synced = True
                self._live(True)
                return
            log.warning(
                "engine %s: KV events do not continue where they were (restarted?); rebuilding",
                self.label,
            )
        batches = await self._replay(0)
        if batches is None:
            return
        self._start_afresh()
        if batches and batches[0][0] != 0:
            log.warning(
                "engine %s: KV events before %d are no longer buffered; what the engine cached"
                " then is not known until it caches it again",
                self.label,
                batches[0][0],
            )
        for seq, payload in batches:
            self._apply(seq, payload)
        self._synced = True
        self._live(True)

    async def _replay(self, start: int) -> list[tuple[int, bytes]] | None:
        """The batches the engine still buffers from ``start`` on, in order
        and without a hole; None if the replay did not answer or had one."""
        assert self.replay_endpoint is not None
        dealer = _socket(self._context, zmq.DEALER, self.replay_endpoint)
        # Unbounded: the engine's side drops what does not fit.
        dealer.setsockopt(zmq.RCVHWM, 0)
        dealer.connect(self.replay_endpoint)
        batches: list[tuple[int, bytes]] = []
        try:
            await dealer.send_multipart([b"", start.to_bytes(8, "big")])
            while True:
                async with asyncio.timeout(self._replay_timeout):
                    frames = await dealer.recv_multipart()
                if len(frames) != 4:
                    continue
                seq = int.from_bytes(frames[2], "big", signed=True)
                if seq == _END:
                    break
                if batches and seq != batches[-1][0] + 1:
                    log.warning("engine %s: the KV event replay skipped %d", self.label, seq)
                    return None
                batches.append((seq, frames[3]))
        except TimeoutError:
            log.warning(
                "engine %s: no KV event replay from %s; retried in %gs",
                self.label,
                self.replay_endpoint,
                _RETRY,
            )
            return None
        finally:
            dealer.close(linger=0)
        return batches

    def _apply(self, seq: int, payload: bytes) -> None:
        try:
            apply(self.index, payload)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.warning("engine %s: KV event batch %d not understood: %s", self.label, seq, exc)
        self._last, self._last_payload = seq, payload

    def _start_afresh(self) -> None:
        self.index.cleared()
        self._last, self._last_payload = None, b""

    def _live(self, live: bool) -> None:
        self.index.live = live
        self._up.set(1 if live else 0)

    def _show(self) -> None:
        self._held.set(len(self.index))


def _socket(context: zmq.asyncio.Context, kind: int, endpoint: str) -> zmq.asyncio.Socket:
    sock = context.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    if "[" in endpoint:
        sock.setsockopt(zmq.IPV6, 1)
    return sock
