"""A request's prefix keys (``app.routing.prefix_key``): the same text keys
the same, except under another prefix-cache salt, as in vLLM's cache."""

from app.owned_fields import CacheScope
from app.routing.prefix_key import CHUNK_CHARS, affinity_of, prefix_chain
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
