"""A key held to its limits, with the headers OpenAI sends; and, in-process
(``tests.support.retry_after``), the Retry-After a client over its key's
limit is told: one that waits it is admitted, one that comes back well
before (at a third of it) is not. The limits run on the in-process store and
on a real redis-server."""

import math
import re
import time
from pathlib import Path

import pytest

from app.keys.file import KeyEntry
from app.keys.quota import KeyQuota, duration
from app.request.errors import RateLimited, TooLong
from app.state.local import LocalLimits
from tests.support.asgi import in_process_gateway
from tests.support.keys import new_key, write_keys_file
from tests.support.redis_server import RedisServer
from tests.support.retry_after import COMPLETIONS, admitted, sleep_until, told
from tests.support.scripted_engine import MODEL
from tests.support.wait import wait_for

HASH = "a" * 64


def key(**limits: int) -> KeyEntry:
    return KeyEntry(id="k", tenant="t", sha256=HASH, **limits)


async def test_a_request_over_the_token_limit_is_refused_with_openai_headers() -> None:
    quota = KeyQuota(LocalLimits(), window=60)
    entry = key(tokens_per_minute=1000, requests_per_minute=10)
    charge = await quota.charge(entry, "r1", 800, 0)
    assert charge.headers["x-ratelimit-remaining-tokens"] == "200"
    assert charge.headers["x-ratelimit-limit-requests"] == "10"
    with pytest.raises(RateLimited) as caught:
        await quota.charge(entry, "r2", 300, 0)
    refused = caught.value
    assert (refused.status, refused.code, refused.type) == (429, "rate_limit_exceeded", "tokens")
    headers = refused.headers()
    assert headers["x-ratelimit-limit-tokens"] == "1000"
    assert headers["x-ratelimit-remaining-tokens"] == "200"
    assert int(headers["Retry-After"]) >= 1
    # Settling to what was used makes room at once.
    charge.settle(100)
    await quota.charge(entry, "r3", 300, 0)


async def test_a_worst_case_above_the_whole_limit_is_a_400() -> None:
    quota = KeyQuota(LocalLimits(), window=60)
    with pytest.raises(TooLong):
        await quota.charge(key(tokens_per_minute=100), "r", 101, 0)


async def test_concurrency_refusal_gives_the_tokens_back() -> None:
    quota = KeyQuota(LocalLimits(), window=60)
    entry = key(tokens_per_minute=1000, max_concurrent=1)
    first = await quota.charge(entry, "r1", 100, 0)
    with pytest.raises(RateLimited):
        await quota.charge(entry, "r2", 100, 0)
    first.settle(100)
    # 100 + 850 fit in 1000 only if r2's reservation was given back.
    await quota.charge(entry, "r3", 850, 0)


async def test_settling_twice_changes_nothing() -> None:
    quota = KeyQuota(LocalLimits(), window=60)
    entry = key(max_concurrent=1)
    charge = await quota.charge(entry, "r1", 10, 0)
    charge.settle(5)
    charge.settle(5)
    await quota.charge(entry, "r2", 10, 0)
    with pytest.raises(RateLimited):
        await quota.charge(entry, "r3", 10, 0)


def test_durations_as_openai_writes_them() -> None:
    assert duration(0.25) == "250ms"
    assert duration(1.0) == "1s"
    assert duration(1.5) == "1.5s"
    assert duration(360) == "6m0s"


# --- Retry-After by value, in-process ---------------------------------------------

# The keys' window, in seconds.
WINDOW = 5

# The second request comes this long after the first: it is told ceil(3.3) =
# 4 s (to the nearest second it would be 3, and the client 0.3 s early).
PAUSE = 1.7

# 60 tokens at worst, and all of them used.
KEYED = {"model": MODEL, "prompt": [11, 12, 13, 14], "max_tokens": 56}

# Each limit lets one KEYED request through per window.
LIMITS = {"requests": {"requests_per_minute": 1}, "tokens": {"tokens_per_minute": 100}}


@pytest.fixture(params=["in_process", "redis"])
def redis_url(request: pytest.FixtureRequest) -> str | None:
    """Where the keys' limits are kept: in the gateway's process, or in a
    real redis-server (its URL; tests/conftest.py's, started only for it)."""
    if request.param == "in_process":
        return None
    server: RedisServer = request.getfixturevalue("redis")
    return server.url


def keys_file(path: Path, limit: str) -> tuple[Path, str]:
    """A keys file with one key held to ``limit``, and the key."""
    limits = LIMITS[limit]
    key, entry = new_key(
        "acme-1",
        "acme",
        requests_per_minute=limits.get("requests_per_minute"),
        tokens_per_minute=limits.get("tokens_per_minute"),
    )
    return write_keys_file(path / "keys.yaml", [entry]), key


def seconds(text: str) -> float:
    """A duration as OpenAI writes it (``250ms``, ``3.3s``, ``1m2s``)."""
    match = re.fullmatch(r"(?:(\d+)m)?([\d.]+)(ms|s)", text)
    assert match, text
    minutes, number, unit = match.groups()
    return int(minutes or 0) * 60 + float(number) / (1000 if unit == "ms" else 1)


@pytest.mark.parametrize("limit", ["requests", "tokens"])
async def test_a_client_over_its_keys_limit_is_told_when_its_window_lets_it_in(
    limit: str, redis_url: str | None, tmp_path: Path
) -> None:
    path, key = keys_file(tmp_path, limit)
    headers = {"authorization": f"Bearer {key}"}
    in_redis = redis_url is not None
    async with in_process_gateway(
        keys_file=path, rate_limit_window=WINDOW, redis_url=redis_url
    ) as gateway:
        if in_redis:
            assert await wait_for(
                lambda: gateway.metric("gateway_shared_state_up") == 1, timeout=30
            )
        first_sent = time.monotonic()
        assert await admitted(gateway, KEYED, headers)
        await sleep_until(first_sent + PAUSE)
        refused = await gateway.request(COMPLETIONS, KEYED, headers=headers).done()
        refused_at = time.monotonic()
        wait = told(refused)
        assert refused.json()["error"]["type"] == limit

        # At a third of the time told (4 / 3 s), the first request is still
        # in the window (for 3.3 s): refused again.
        await sleep_until(refused_at + wait / 3)
        assert not await admitted(gateway, KEYED, headers)

        # After the time told, it has left: admitted.
        await sleep_until(refused_at + wait)
        assert await admitted(gateway, KEYED, headers)
        # Redis answered every call (the limits never fell back in process).
        assert gateway.metric("gateway_shared_state_up") == in_redis
    # The first request leaves the window at the same moment the limit is
    # back to its initial state: one number, rounded up in both headers.
    assert wait == math.ceil(seconds(refused.headers[f"x-ratelimit-reset-{limit}"]))


def test_openai_reset_durations_are_rounded_up_to_the_millisecond() -> None:
    assert duration(0.0001) == "1ms"
    assert duration(0.2501) == "251ms"
    assert duration(3.3001) == "3.301s"
    # Float noise is not a millisecond more: 2,007 ms from Redis is 2.007 s.
    assert duration(2007 / 1000) == "2.007s"
    assert duration(3.3) == "3.3s"
