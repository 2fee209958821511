"""What one engine's prefix cache holds, block by block, from its KV cache
events — keyed so that a request's prompt can be looked up in it.

vLLM names each cached block by a hash chained over the blocks before it:
SHA-256 of a pickle by default, its chain seeded by a constant (or by
``PYTHONHASHSEED``), other algorithms on a flag. Computing the same hash
here would tie the gateway to those internals and to every engine's flags.
It does not need to: a stored block's event carries its token ids and its
parent's hash, so the index keys each block by a chain of its own —
``block_chain`` over the token ids, from the request's cache salt — and
keeps vLLM's hash only to find a new block's parent and a removed block.
A request's prompt, as token ids, is chained the same way, and the engine
holds as many of its leading blocks as the index finds in a row.

The salt is part of the first block's key, as it is of vLLM's (the event
carries it among the block's "extra keys"); so are any other extra keys an
event carries for a block (a LoRA adapter's name, an image's identifier),
which a prompt of token ids has none of: such blocks never match one — the
index under-counts, never over-counts. No I/O: the engine's subscriber
(``app.engine.kv_events``) feeds it; routing reads it.
"""

import hashlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

# vLLM's name of a block: an int (its default) or bytes.
EngineHash = int | bytes
# A block in one engine's events: its storage medium, KV cache group, hash.
_Where = tuple[str | None, int | None, EngineHash]

_ENCODE = msgspec.msgpack.Encoder()


def block_chain(
    ids: Sequence[int], block_size: int, salt: str | None = None, limit: int | None = None
) -> tuple[int, ...]:
    """The index's key of each whole block of ``ids`` (at most ``limit``),
    each chained to the one before, the first from ``salt``."""
    blocks = len(ids) // block_size
    if limit is not None:
        blocks = min(blocks, limit)
    keys: list[int] = []
    previous = b""
    for i in range(blocks):
        extra = [salt] if i == 0 and salt else None
        previous = _link(previous, ids[i * block_size : (i + 1) * block_size], extra)
        keys.append(int.from_bytes(previous, "big"))
    return tuple(keys)


def _link(previous: bytes, ids: Sequence[int], extra: list[Any] | None) -> bytes:
    data = previous + array("q", ids).tobytes()
    if extra:
        data += _ENCODE.encode(extra)
    return hashlib.blake2b(data, digest_size=8).digest()


@dataclass(frozen=True)
class PromptBlocks:
    """A request's prompt as routing looks it up in the engines' caches: its
    token ids and its cache salt; the chain of its blocks is made once per
    block size."""

    ids: tuple[int, ...]
    salt: str | None = None
    _chains: dict[int, tuple[int, ...]] = field(default_factory=dict, compare=False, repr=False)

    def chain(self, block_size: int) -> tuple[int, ...]:
        chain = self._chains.get(block_size)
        if chain is None:
            chain = self._chains[block_size] = block_chain(self.ids, block_size, self.salt)
        return chain


class BlockIndex:
    """The blocks one engine holds, as the index keys them.

    ``live`` says whether it is to be trusted now: the subscriber sets it
    while the engine's events arrive in sequence, and clears it while it is
    disconnected or a gap is being filled."""

    def __init__(self) -> None:
        self.live = False
        # The engine's block size, from its events (None: none seen yet).
        self.block_size: int | None = None
        # vLLM's hash of a stored block → the index's key and how many
        # copies the engine stores under that hash (two requests that
        # computed one prefix at once each cache a copy).
        self._keys: dict[_Where, tuple[int, int]] = {}
        # The index's key → copies held, whatever medium or group.
        self._held: dict[int, int] = {}

    def __len__(self) -> int:
        """Distinct blocks held."""
        return len(self._held)

    def stored(
        self,
        hashes: Sequence[EngineHash],
        parent: EngineHash | None,
        token_ids: Sequence[int],
        block_size: int,
        extra_keys: Sequence[Sequence[Any] | None] | None = None,
        medium: str | None = None,
        group: int | None = None,
    ) -> bool:
        """Blocks the engine stored, in order, the first a child of
        ``parent``. False (and nothing indexed) when they cannot be keyed:
        a parent the index never saw, or not whole blocks of the engine's
        size (vLLM's sub-block entries of hybrid models)."""
        if self.block_size is None:
            self.block_size = block_size
        if block_size != self.block_size or len(token_ids) != len(hashes) * block_size:
            return False
        if parent is None:
            previous = b""
        else:
            known = self._keys.get((medium, group, parent))
            if known is None:
                return False
            previous = known[0].to_bytes(8, "big")
        for i, engine_hash in enumerate(hashes):
            extra = extra_keys[i] if extra_keys and i < len(extra_keys) else None
            previous = _link(
                previous, token_ids[i * block_size : (i + 1) * block_size], _plain(extra)
            )
            key = int.from_bytes(previous, "big")
            where = (medium, group, engine_hash)
            _, copies = self._keys.get(where, (key, 0))
            self._keys[where] = (key, copies + 1)
            self._held[key] = self._held.get(key, 0) + 1
        return True

    def removed(
        self, hashes: Sequence[EngineHash], medium: str | None = None, group: int | None = None
    ) -> None:
        """Blocks the engine evicted (a hash the index never saw is ignored)."""
        for engine_hash in hashes:
            where = (medium, group, engine_hash)
            known = self._keys.get(where)
            if known is None:
                continue
            key, copies = known
            if copies > 1:
                self._keys[where] = (key, copies - 1)
            else:
                del self._keys[where]
            held = self._held.get(key, 0) - 1
            if held > 0:
                self._held[key] = held
            else:
                self._held.pop(key, None)

    def cleared(self) -> None:
        """The engine dropped its whole cache (or restarted)."""
        self._keys.clear()
        self._held.clear()

    def leading(self, prompt: PromptBlocks) -> int:
        """How many of the prompt's leading blocks the engine holds."""
        if self.block_size is None:
            return 0
        count = 0
        for key in prompt.chain(self.block_size):
            if key not in self._held:
                break
            count += 1
        return count


def _plain(extra: Sequence[Any] | None) -> list[Any] | None:
    """An event's extra keys for one block, as ``block_chain`` encodes a
    salt: a list, or None for none."""
    return list(extra) if extra else None
