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
the engines' caches as blocks (``prompt_blocks``).
"""

import hashlib
from array import array

from app.routing.block_index import PromptBlocks
from app.validation import CompletionJob

CHUNK_CHARS = 256
AFFINITY_CHUNKS = 8
AFFINITY_TOKENS = 512


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


def affinity_of(job: CompletionJob) -> int | None:
    """The routing key of a request's (first) prompt: of its first token ids
    when they are known, else of its text."""
    prompt = job.prompts[0]
    if prompt.ids:
        ids = array("q", prompt.ids[:AFFINITY_TOKENS]).tobytes()
        digest = hashlib.blake2b(_seed(job.cache_salt) + ids, digest_size=8).digest()
        return int.from_bytes(digest, "big")
    text = prompt.text
    if not text:
        return None
    chain = prefix_chain(text, AFFINITY_CHUNKS, job.cache_salt)
    if chain:
        return chain[-1]
    short = hashlib.blake2b(
        _seed(job.cache_salt) + text.encode("utf-8", "surrogatepass"), digest_size=8
    ).digest()
    return int.from_bytes(short, "big")


def prompt_blocks(job: CompletionJob) -> PromptBlocks | None:
    """The request's (first) prompt as the engines' caches are looked up
    with, when its token ids are known."""
    prompt = job.prompts[0]
    return PromptBlocks(prompt.ids, job.cache_salt) if prompt.ids else None


def _seed(salt: str | None) -> bytes:
    """Where a chain starts: nothing unsalted, else a fixed-size digest of
    the salt (so no salt and text run into each other)."""
    if salt is None:
        return b""
    return hashlib.blake2b(salt.encode(), digest_size=8, person=b"salt").digest()
