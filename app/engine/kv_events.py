"""vLLM's KV cache events as they come over the wire, applied to an engine's
``BlockIndex``; and where an engine publishes them.

vLLM started with ``--kv-events-config`` publishes, after every scheduler
step that cached or evicted blocks, one batch of events on a ZeroMQ PUB
socket: three frames, the topic, the batch's sequence number (8 bytes, big
endian, from 0 at the engine's start) and the batch (msgpack: ``[ts,
events, dp_rank]``, each event a map tagged by ``type`` — ``BlockStored``,
``BlockRemoved``, ``AllBlocksCleared``). Its replay socket (ROUTER), asked
with a sequence number, sends every batch it still buffers from there on,
then an end marker (sequence -1). ``app.engine.kv_subscriber`` keeps them
in order.
"""

import re
from typing import Any
from urllib.parse import urlsplit

import msgspec

from app.routing.block_index import BlockIndex

_PLACEHOLDER = re.compile(r"\{(host|port(?:[+-]\d+)?)\}")

# The wire format (vLLM's vllm/distributed/kv_events.py); fields it adds
# later are ignored.


class BlockStored(msgspec.Struct, tag=True):
    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    block_size: int
    medium: str | None = None
    extra_keys: list[list[Any] | None] | None = None
    group_idx: int | None = None


class BlockRemoved(msgspec.Struct, tag=True):
    block_hashes: list[int | bytes]
    medium: str | None = None
    group_idx: int | None = None


class AllBlocksCleared(msgspec.Struct, tag=True):
    pass


Event = BlockStored | BlockRemoved | AllBlocksCleared


class _Batch(msgspec.Struct, array_like=True):
    ts: float
    # Each decoded on its own, so that an event type added later is skipped
    # rather than failing its batch.
    events: list[msgspec.Raw]
    data_parallel_rank: int | None = None


_decode_batch = msgspec.msgpack.Decoder(_Batch).decode
_decode_event = msgspec.msgpack.Decoder(Event).decode


def apply(index: BlockIndex, payload: bytes) -> None:
    """One batch's events, applied in order."""
    for raw in _decode_batch(payload).events:
        try:
            event = _decode_event(raw)
        except msgspec.ValidationError:
            continue  # an event of a kind the index does not track
        if isinstance(event, BlockStored):
            index.stored(
                event.block_hashes,
                event.parent_block_hash,
                event.token_ids,
                event.block_size,
                event.extra_keys,
                event.medium,
                event.group_idx,
            )
        elif isinstance(event, BlockRemoved):
            index.removed(event.block_hashes, event.medium, event.group_idx)
        else:
            index.cleared()


def endpoint_for(template: str, engine_url: str) -> str:
    """The ZeroMQ endpoint of an engine's events: ``template`` with
    ``{host}`` as the engine URL's host and ``{port}`` as its port, plus or
    minus an offset (``{port+100}``): ``tcp://{host}:5557`` for engines each
    on an address of their own (pods behind a DNS name), ``{port+N}`` for
    several on one host."""
    parts = urlsplit(engine_url.removeprefix("dns+"))
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 80)

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "host":
            return f"[{host}]" if ":" in host else host
        return str(port + int(name[4:] or 0))

    endpoint = _PLACEHOLDER.sub(value, template)
    if not endpoint.startswith("tcp://") or "{" in endpoint or "}" in endpoint:
        raise ValueError(
            f"KV events endpoint {template!r}: expected tcp://HOST:PORT, where HOST may be {{host}}"
            " and PORT {port}, {port+N} or a number"
        )
    return endpoint
