"""Retry-After by value: a client that waits the time it is told is admitted,
and one that comes back well before (at a third of it) is not.

In process (``tests.support.asgi``), in front of a scripted engine: the test
decides when each request the engine runs ends, so the scenario is fixed.
Time is the real clock's, with a second or more to spare wherever a busy
machine could stretch a sleep. Key limits run on the in-process store and on
a real redis-server.
"""

import asyncio
import math
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.admission.policy import QueueFull
from app.keys.quota import duration
from tests.admission.test_policy import add, admit, admit_all, policy, waiter
from tests.support.asgi import Exchange, InProcessGateway, in_process_gateway
from tests.support.keys import new_key, write_keys_file
from tests.support.redis_server import RedisServer
from tests.support.scripted_engine import MODEL, EngineCall

COMPLETIONS = "/v1/completions"


async def sleep_until(moment: float) -> None:
    await asyncio.sleep(max(0.0, moment - time.monotonic()))


async def until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the state never came"
        await asyncio.sleep(0.01)


def answer(call: EngineCall, body: dict[str, Any]) -> None:
    """The engine's answer: every token the request may write."""
    usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": body["max_tokens"]}
    call.answer(200, {"choices": [{"index": 0, "text": "x"}], "usage": usage})


async def admitted(
    gateway: InProcessGateway, body: dict[str, Any], headers: dict[str, str]
) -> bool:
    """Whether a request is admitted — it reaches the engine, which answers
    it at once — or refused."""
    exchange = gateway.request(COMPLETIONS, body, headers=headers)
    call = asyncio.ensure_future(gateway.engine.calls.get())
    done, _ = await asyncio.wait(
        {call, exchange.task}, timeout=30, return_when=asyncio.FIRST_COMPLETED
    )
    assert done, "neither admitted nor refused in 30 s"
    if not call.done():
        call.cancel()
        await exchange.done()
        assert exchange.status == 429, exchange.body
        return False
    answer(call.result(), body)
    await exchange.done()
    assert exchange.status == 200, exchange.body
    return True


def told(exchange: Exchange) -> int:
    assert exchange.status == 429, exchange.body
    return int(exchange.headers["retry-after"])


# --- refused for capacity ------------------------------------------------------

# One request runs at a time (max_concurrency 1), each for BLOCKER_SECONDS.
BLOCKER_SECONDS = 3.6
# Token ids (counted exactly): 40 tokens at worst.
BLOCKER = {"model": MODEL, "prompt": [11, 12, 13, 14], "max_tokens": 36}
# 1.75 times a blocker's tokens: at the rate the queue drains, a wait of
# 1.75 × 3.6 = 6.3 s, longer than the deadline, so refused at once and told
# 7 s; in fact it fits as soon as the running blocker ends, within 3.6 s.
LARGE = {**BLOCKER, "max_tokens": 66}
# Between a blocker's wait behind another (3.6 s) and LARGE's (6.3 s).
QUEUE_TIMEOUT = 4.95


def test_a_request_the_order_admits_at_once_is_not_refused_for_a_predicted_wait() -> None:
    """Drained at 100 tokens/s (one 100-token request a second), a
    400-token request is predicted to wait 4 s, past a 3 s deadline: refused
    while a request runs, admitted once the engine is free — else the
    Retry-After it was told would never come true."""
    p = policy(blocks=10, block_size=100, max_sequences=1, max_wait=3.0)
    add(p, waiter(tokens=100))
    (running,) = admit_all(p)
    for second in (1, 2, 3):
        # The next one waits (a dispatch round finds no room) until the
        # running one ends a second later.
        add(p, waiter(tokens=100, at=second - 1))
        assert admit(p, now=second - 1) == []
        p.release(running[1])
        (running,) = admit_all(p, now=second)
    assert p.forecast.rate() == pytest.approx(100, rel=0.05)
    with pytest.raises(QueueFull) as refused:
        add(p, waiter(tokens=400, at=3))
    assert refused.value.retry_after == pytest.approx(4.0, rel=0.05)
    p.release(running[1])
    assert admit(p, now=4) == []
    large = add(p, waiter(tokens=400, at=4))
    assert admit(p, now=4) == [large]


async def measured_blocker(gateway: InProcessGateway) -> tuple[Exchange, EngineCall, float]:
    """One blocker waits behind another until it ends: the gateway measures
    its queue draining one blocker's tokens per BLOCKER_SECONDS. Returns the
    second blocker (its exchange and engine call), running with nothing
    queued, and when it started."""
    first = gateway.request(COMPLETIONS, BLOCKER)
    first_call = await asyncio.wait_for(gateway.engine.calls.get(), 30)
    first_started = time.monotonic()
    second = gateway.request(COMPLETIONS, BLOCKER)
    await until(lambda: gateway.metric("gateway_queue_depth") == 1)
    await sleep_until(first_started + BLOCKER_SECONDS)
    answer(first_call, BLOCKER)
    call = await asyncio.wait_for(gateway.engine.calls.get(), 30)
    started = time.monotonic()
    await first.done()
    assert first.status == 200
    return second, call, started


async def test_a_client_refused_for_capacity_is_told_when_it_will_be_admitted() -> None:
    async with in_process_gateway(max_concurrency=1, queue_timeout=QUEUE_TIMEOUT) as gateway:
        exchange, blocker, started = await measured_blocker(gateway)
        ends = started + BLOCKER_SECONDS

        async def end_blocker() -> None:
            """The blocker ends at its known length, whoever comes back when."""
            await sleep_until(ends)
            answer(blocker, BLOCKER)

        ending = asyncio.create_task(end_blocker())
        early, obedient = {"x-tenant-id": "early"}, {"x-tenant-id": "obedient"}
        refusals = [
            await gateway.request(COMPLETIONS, LARGE, headers=h).done() for h in (early, obedient)
        ]
        refused_at = time.monotonic()
        assert [r.json()["error"]["code"] for r in refusals] == ["over_capacity"] * 2
        early_wait, obedient_wait = (told(r) for r in refusals)

        # At a third of the time told (7 / 3 s), the blocker still runs (for
        # 3.6 s): refused again.
        await sleep_until(refused_at + early_wait / 3)
        assert not await admitted(gateway, LARGE, early)

        # After the time told, the blocker has ended: admitted at once.
        await sleep_until(refused_at + obedient_wait)
        assert await admitted(gateway, LARGE, obedient)
        assert ending.done()
        assert (await exchange.done()).status == 200


# --- refused by a key's limit -----------------------------------------------------

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
            await until(lambda: gateway.metric("gateway_shared_state_up") == 1)
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
