"""A key held to its limits, with the headers OpenAI sends."""

import pytest

from app.errors import RateLimited, TooLong
from app.keys.file import KeyEntry
from app.keys.quota import KeyQuota, duration
from app.state.local import LocalLimits

HASH = "a" * 64


def key(**limits: int) -> KeyEntry:
    return KeyEntry(id="k", tenant="t", sha256=HASH, **limits)


async def test_a_request_over_the_token_limit_is_refused_with_openai_headers() -> None:
    quota = KeyQuota(LocalLimits(), window=60)
    entry = key(tokens_per_minute=1000, requests_per_minute=10)
    charge = await quota.charge(entry, "r1", 800)
    assert charge.headers["x-ratelimit-remaining-tokens"] == "200"
    assert charge.headers["x-ratelimit-limit-requests"] == "10"
    with pytest.raises(RateLimited) as caught:
        await quota.charge(entry, "r2", 300)
    refused = caught.value
    assert (refused.status, refused.code, refused.type) == (429, "rate_limit_exceeded", "tokens")
    headers = refused.headers()
    assert headers["x-ratelimit-limit-tokens"] == "1000"
    assert headers["x-ratelimit-remaining-tokens"] == "200"
    assert int(headers["Retry-After"]) >= 1
    # Settling to what was used makes room at once.
    charge.settle(100)
    await quota.charge(entry, "r3", 300)


async def test_a_worst_case_above_the_whole_limit_is_a_400() -> None:
    quota = KeyQuota(LocalLimits(), window=60)
    with pytest.raises(TooLong):
        await quota.charge(key(tokens_per_minute=100), "r", 101)


async def test_concurrency_refusal_gives_the_tokens_back() -> None:
    quota = KeyQuota(LocalLimits(), window=60)
    entry = key(tokens_per_minute=1000, max_concurrent=1)
    first = await quota.charge(entry, "r1", 100)
    with pytest.raises(RateLimited):
        await quota.charge(entry, "r2", 100)
    first.settle(100)
    # 100 + 850 fit in 1000 only if r2's reservation was given back.
    await quota.charge(entry, "r3", 850)


async def test_settling_twice_changes_nothing() -> None:
    quota = KeyQuota(LocalLimits(), window=60)
    entry = key(max_concurrent=1)
    charge = await quota.charge(entry, "r1", 10)
    charge.settle(5)
    charge.settle(5)
    await quota.charge(entry, "r2", 10)
    with pytest.raises(RateLimited):
        await quota.charge(entry, "r3", 10)


def test_durations_as_openai_writes_them() -> None:
    assert duration(0.25) == "250ms"
    assert duration(1.0) == "1s"
    assert duration(1.5) == "1.5s"
    assert duration(360) == "6m0s"
