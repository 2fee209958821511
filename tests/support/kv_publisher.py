"""An engine's KV cache event publisher, in process, speaking what vLLM 0.32's
``ZmqEventPublisher`` speaks (vllm/distributed/kv_events.py): batches on a
PUB socket as (topic, sequence number, msgpack batch), every batch kept for
the ROUTER replay socket, which answers a start sequence number with the
batches from there on and an end marker. A batch can be kept but not sent
(what a subscriber misses when PUB drops it), and the publisher restarted
on the same ports with its sequence from 0 (an engine restarted)."""

import asyncio
import time
from contextlib import suppress
from typing import Any

import msgspec
import zmq
import zmq.asyncio

END = (-1).to_bytes(8, "big", signed=True)
SIZE = 4


def stored(
    hashes: list[int], parent: int | None, ids: list[int], salt: str | None = None
) -> dict[str, Any]:
    """A ``BlockStored`` event as vLLM encodes it (blocks of ``SIZE``)."""
    extra = [[salt], *([None] * (len(hashes) - 1))] if salt else None
    return {
        "type": "BlockStored",
        "block_hashes": hashes,
        "parent_block_hash": parent,
        "token_ids": ids,
        "block_size": SIZE,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
        "extra_keys": extra,
        "group_idx": 0,
    }


def removed(hashes: list[int]) -> dict[str, Any]:
    return {"type": "BlockRemoved", "block_hashes": hashes, "medium": "GPU", "group_idx": 0}


class ScriptedPublisher:
    def __init__(self, port: int, replay_port: int) -> None:
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.replay_endpoint = f"tcp://127.0.0.1:{replay_port}"
        self._context = zmq.asyncio.Context()
        self._pub: zmq.asyncio.Socket | None = None
        self._router: zmq.asyncio.Socket | None = None
        self._replays: asyncio.Task[None] | None = None
        self._buffer: list[tuple[int, bytes]] = []
        self.replays_served = 0

    async def start(self) -> None:
        """Bind (again), with the sequence from 0 and nothing buffered."""
        self._buffer = []
        self._pub = self._context.socket(zmq.PUB)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._pub.bind(self.endpoint)
        self._router = self._context.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.LINGER, 0)
        self._router.bind(self.replay_endpoint)
        self._replays = asyncio.create_task(self._serve_replays(self._router))

    async def stop(self) -> None:
        if self._replays is not None:
            self._replays.cancel()
            with suppress(asyncio.CancelledError):
                await self._replays
        for sock in (self._pub, self._router):
            if sock is not None:
                sock.close(linger=0)
        self._pub = self._router = None

    def close(self) -> None:
        self._context.destroy(linger=0)

    async def publish(self, *events: dict[str, Any], deliver: bool = True) -> int:
        """One batch of ``events``; its sequence number. ``deliver=False``:
        buffered for the replay, never sent (a drop)."""
        assert self._pub is not None
        seq = len(self._buffer)
        payload = msgspec.msgpack.encode([time.time(), list(events), 0])
        self._buffer.append((seq, payload))
        if deliver:
            await self._pub.send_multipart([b"", seq.to_bytes(8, "big"), payload])
        return seq

    async def _serve_replays(self, router: zmq.asyncio.Socket) -> None:
        while True:
            client, _, start = await router.recv_multipart()
            first = int.from_bytes(start, "big")
            for seq, payload in self._buffer:
                if seq >= first:
                    await router.send_multipart([client, b"", b"", seq.to_bytes(8, "big"), payload])
            await router.send_multipart([client, b"", b"", END, b""])
            self.replays_served += 1
