"""A request's prefix keys (``app.routing.prefix_key``): the same text keys
the same, except under another prefix-cache salt, as in vLLM's cache."""

from app.request.owned_fields import CacheScope
from app.request.validation import CompletionJob, Limits, check_request
from app.routing.prefix_key import (
    AFFINITY_CHUNKS,
    AFFINITY_TOKENS,
    CHUNK_CHARS,
    PIECE_TOKENS,
    PREFIX_PIECES,
    PromptKeys,
    prefix_chain,
    prompt_keys,
)

TEXT = "shared system prompt " * 200


def keys(job: CompletionJob) -> PromptKeys:
    return prompt_keys(job, lambda chars: chars // 4)


def affinity_of(job: CompletionJob) -> int | None:
    return keys(job).affinity


def job(text: str, scope: CacheScope | None) -> CompletionJob:
    body = {"model": "tiny", "prompt": text}
    return check_request("completions", body, {"tiny": None}, Limits(4, 4), "1.1", scope)


def test_two_tenants_never_share_a_prefix_key_and_a_sharing_key_keys_as_before() -> None:
    for text in (TEXT, "short"):
        a, b = job(text, CacheScope("a")), job(text, CacheScope("b"))
        assert affinity_of(a) != affinity_of(b)
        assert affinity_of(a) == affinity_of(job(text, CacheScope("a")))
        assert affinity_of(job(text, CacheScope(None))) == affinity_of(job(text, None))
    chain_a, chain_b = (
        prefix_chain(TEXT, 4, j.cache_salt)
        for j in (job(TEXT, CacheScope("a")), job(TEXT, CacheScope("b")))
    )
    assert len(chain_a) == 4
    assert not set(chain_a) & set(chain_b)
    assert len(TEXT) > 4 * CHUNK_CHARS


def ids_job(ids: list[int], scope: CacheScope | None = None) -> CompletionJob:
    body = {"model": "tiny", "prompt": ids}
    return check_request("completions", body, {"tiny": None}, Limits(4, 4), "1.1", scope)


def test_a_prompt_of_token_ids_is_keyed_by_its_first_ids_and_its_salt() -> None:
    start = list(range(AFFINITY_TOKENS))
    a, b = ids_job([*start, 1, 2, 3]), ids_job([*start, 9])
    assert affinity_of(a) is not None
    assert affinity_of(a) == affinity_of(b)
    assert affinity_of(ids_job([5, *start])) != affinity_of(a)
    assert affinity_of(ids_job(start, CacheScope("t"))) != affinity_of(a)
    blocks = keys(ids_job(start, CacheScope("t"))).blocks
    assert blocks is not None
    assert blocks.ids == tuple(start)
    assert blocks.salt is not None
    assert keys(job(TEXT, None)).blocks is None


def test_a_texts_routing_key_is_a_link_of_its_prefix_chain() -> None:
    """One chain serves both: the routing key is its link after
    AFFINITY_CHUNKS pieces, the pieces go on to PREFIX_PIECES with the
    tokens estimated up to the end of each."""
    text = "x" * (CHUNK_CHARS * (PREFIX_PIECES + 3))
    made = keys(job(text, CacheScope("a")))
    chain = prefix_chain(text, PREFIX_PIECES, job(text, CacheScope("a")).cache_salt)
    assert made.affinity == chain[AFFINITY_CHUNKS - 1]
    assert [piece for piece, _ in made.pieces] == list(chain)
    assert made.pieces[0][1] == CHUNK_CHARS // 4
    short = keys(job(TEXT[: CHUNK_CHARS * 3], None))
    assert short.affinity == prefix_chain(TEXT, 3)[-1]


def test_a_prompt_of_ids_is_pieced_by_counted_tokens() -> None:
    made = keys(ids_job(list(range(PIECE_TOKENS * 2 + 5))))
    assert [tokens for _, tokens in made.pieces] == [PIECE_TOKENS, PIECE_TOKENS * 2]
