"""A request's prefix, as keys for routing (and for prefix-aware demand).

vLLM's prefix cache hashes a prompt's tokens block by block, each block's
hash chained to the one before, so two prompts share cached blocks exactly as
far as their leading tokens agree. The gateway does not tokenize; it does
the same over the prompt's text, in pieces of ``CHUNK_CHARS`` characters:
``prefix_chain`` gives one chained hash per whole piece. The routing key is
the hash after the first ``AFFINITY_CHUNKS`` pieces (or fewer, for a shorter
prompt): requests that agree on their first couple of thousand characters —
the system prompt and a RAG document, the conversation so far — share it.
The chain starts from the request's prefix-cache salt, as vLLM's does: two
requests of different salts share no cached block, so no key either.

A prompt whose token ids are known is keyed by its first ``AFFINITY_TOKENS``
ids instead (about as much of it as the text key covers), and looked up in
the engines' caches as blocks (``PromptKeys.blocks``).

Prefix-aware demand (``app.admission.budget``) counts what an engine already
holds of a prompt by the same chains, further: ``PREFIX_PIECES`` pieces (of
text, or of ``PIECE_TOKENS`` token ids). ``prompt_keys`` makes all of a
request's keys at once — the routing key is a link of the text's chain — and
the request carries them from then on: a retry or a second look at the
queue hashes nothing again.
"""

import hashlib
from array import array
from collections.abc import Callable
from dataclasses import dataclass

from app.request.validation import CompletionJob
from app.routing.block_index import PromptBlocks, block_chain

CHUNK_CHARS = 256
AFFINITY_CHUNKS = 8
AFFINITY_TOKENS = 512
# How much of a prompt's prefix is tracked for prefix-aware demand (pieces of
# CHUNK_CHARS characters: 64 × 256 = 16k characters, a few thousand tokens;
# or, for a prompt of known token ids, of PIECE_TOKENS tokens).
PREFIX_PIECES = 64
PIECE_TOKENS = 64


@dataclass(frozen=True)
class PromptKeys:
    """A request's (first) prompt, keyed once: its routing key, its prefix
    pieces with the tokens up to the end of each (counted for token ids,
    estimated for text), and its blocks as the engines' caches are looked
    up with (token ids known)."""

    affinity: int | None = None
    pieces: tuple[tuple[int, int], ...] = ()
    blocks: PromptBlocks | None = None


def prompt_keys(job: CompletionJob, tokens_in: Callable[[int], int]) -> PromptKeys:
    """All of ``job``'s keys; ``tokens_in(chars)``: the tokens estimated
    for that many characters of its text."""
    prompt = job.prompts[0]
    if prompt.ids:
        chain = block_chain(prompt.ids, PIECE_TOKENS, job.cache_salt, PREFIX_PIECES)
        return PromptKeys(
            _ids_affinity(prompt.ids, job.cache_salt),
            tuple((piece, (i + 1) * PIECE_TOKENS) for i, piece in enumerate(chain)),
            PromptBlocks(prompt.ids, job.cache_salt),
        )
    if not prompt.text:
        return PromptKeys()
    chain = prefix_chain(prompt.text, PREFIX_PIECES, job.cache_salt)
    pieces = tuple((piece, tokens_in((i + 1) * CHUNK_CHARS)) for i, piece in enumerate(chain))
    if chain:
        # The routing key is the chain's link after AFFINITY_CHUNKS pieces.
        return PromptKeys(chain[:AFFINITY_CHUNKS][-1], pieces)
    return PromptKeys(_short_affinity(prompt.text, job.cache_salt))


def prefix_chain(text: str, limit: int | None = None, salt: str | None = None) -> tuple[int, ...]:
    """Chained hashes of the text's whole pieces (at most ``limit``), from
    ``salt``'s."""
    pieces = len(text) // CHUNK_CHARS
    if limit is not None:
        pieces = min(pieces, limit)
    chain: list[int] = []
    previous = _seed(salt)
    for i in range(pieces):
        piece = text[i * CHUNK_CHARS : (i + 1) * CHUNK_CHARS].encode("utf-8", "surrogatepass")
        previous = hashlib.blake2b(previous + piece, digest_size=8).digest()
        chain.append(int.from_bytes(previous, "big"))
    return tuple(chain)


def _ids_affinity(ids: tuple[int, ...], salt: str | None) -> int:
    data = array("q", ids[:AFFINITY_TOKENS]).tobytes()
    return int.from_bytes(hashlib.blake2b(_seed(salt) + data, digest_size=8).digest(), "big")


def _short_affinity(text: str, salt: str | None) -> int:
    """A prompt shorter than one piece: keyed by the whole of it."""
    data = _seed(salt) + text.encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def _seed(salt: str | None) -> bytes:
    """Where a chain starts: nothing unsalted, else a fixed-size digest of
    the salt (so no salt and text run into each other)."""
    if salt is None:
        return b""
    return hashlib.blake2b(salt.encode(), digest_size=8, person=b"salt").digest()
