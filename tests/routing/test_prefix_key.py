"""A request's prefix keys (``app.routing.prefix_key``): the same text keys
the same, except under another prefix-cache salt, as in vLLM's cache."""

from app.owned_fields import CacheScope
from app.routing.prefix_key import (
    AFFINITY_TOKENS,
    CHUNK_CHARS,
    affinity_of,
    prefix_chain,
    prompt_blocks,
)
from app.validation import CompletionJob, Limits, check_request

TEXT = "shared system prompt " * 200


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
    blocks = prompt_blocks(ids_job(start, CacheScope("t")))
    assert blocks is not None
    assert blocks.ids == tuple(start)
    assert blocks.salt is not None
    assert prompt_blocks(job(TEXT, None)) is None
