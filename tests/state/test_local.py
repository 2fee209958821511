"""Limits kept in this process: a moving window of requests, a settleable
log of tokens (what a request is charged in it: ``app.keys.quota``),
concurrent slots."""

import random
from collections.abc import Callable
from dataclasses import dataclass

from app.state.local import LocalLimits


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_tokens_are_held_in_a_sliding_window() -> None:
    clock = Clock()
    limits = LocalLimits(clock)
    assert (await limits.reserve_tokens("k", "a", 600, 600, 1000, 60)).allowed
    clock.now += 30
    refused = await limits.reserve_tokens("k", "b", 500, 500, 1000, 60)
    assert not refused.allowed
    assert refused.remaining == 400
    # "a" leaves the window 60 s after it was charged: 30 s from now.
    assert refused.retry_after == 30
    clock.now += 30
    assert (await limits.reserve_tokens("k", "b", 500, 500, 1000, 60)).allowed


async def test_settling_replaces_the_reservation_with_what_was_used() -> None:
    clock = Clock()
    limits = LocalLimits(clock)
    await limits.reserve_tokens("k", "a", 900, 900, 1000, 60)
    assert not (await limits.reserve_tokens("k", "b", 200, 200, 1000, 60)).allowed
    limits.settle_tokens("k", "a", 100)
    verdict = await limits.reserve_tokens("k", "b", 200, 200, 1000, 60)
    assert verdict.allowed
    assert verdict.remaining == 700
    # A charge that already left the window is not settled into the new one.
    clock.now += 61
    limits.settle_tokens("k", "b", 5000)
    assert (await limits.reserve_tokens("k", "c", 1000, 1000, 1000, 60)).allowed


async def test_keys_do_not_share_limits() -> None:
    limits = LocalLimits(Clock())
    await limits.reserve_tokens("a", "1", 1000, 1000, 1000, 60)
    assert (await limits.reserve_tokens("b", "1", 1000, 1000, 1000, 60)).allowed


async def test_requests_in_a_moving_window() -> None:
    limits = LocalLimits()
    verdicts = [await limits.hit_requests("k", 3, 60) for _ in range(4)]
    assert [v.allowed for v in verdicts] == [True, True, True, False]
    assert verdicts[2].remaining == 0
    assert 0 < verdicts[3].retry_after <= 60


async def test_concurrent_slots() -> None:
    limits = LocalLimits()
    assert await limits.acquire_slot("k", 2)
    assert await limits.acquire_slot("k", 2)
    assert not await limits.acquire_slot("k", 2)
    limits.release_slot("k")
    assert await limits.acquire_slot("k", 2)


# --- what a request is charged: between its estimate and its worst case ------------

LIMIT = 1000
WINDOW = 10


@dataclass
class Ask:
    """One request of the traffic: its worst case, its estimate, what it
    uses and how long it runs."""

    worst: int
    estimate: int
    used: int
    seconds: float


@dataclass
class Charged:
    at: float
    charged: int
    worst: int
    used: int


async def closed_loop(
    limits: LocalLimits, clock: Clock, users: int, seconds: float, next_ask: Callable[[], Ask]
) -> list[Charged]:
    """``users`` clients, each sending its next request as soon as the last
    ended, or 0.1 s after a refusal, on the scripted clock in steps of 50
    ms; every request settles to what it used when it ends. Returns the
    requests admitted."""
    start = clock.now
    admitted: list[Charged] = []
    running: list[tuple[float, str, int]] = []  # ends at, charge, used
    free_at = [start] * users
    asks = [next_ask() for _ in range(users)]
    step = 0
    while clock.now < start + seconds:
        for ends in [r for r in running if r[0] <= clock.now]:
            running.remove(ends)
            limits.settle_tokens("k", ends[1], ends[2])
        for user in range(users):
            if free_at[user] > clock.now:
                continue
            ask, charge = asks[user], f"c{len(admitted)}"
            verdict = await limits.reserve_tokens(
                "k", charge, ask.estimate, ask.worst, LIMIT, WINDOW
            )
            if not verdict.allowed:
                free_at[user] = clock.now + 0.1
                continue
            admitted.append(Charged(clock.now, verdict.charged, ask.worst, ask.used))
            running.append((clock.now + ask.seconds, charge, ask.used))
            free_at[user] = clock.now + ask.seconds
            asks[user] = next_ask()
        step += 1
        clock.now = start + step * 0.05
    return admitted


def most_in_a_window(admitted: list[Charged]) -> int:
    """The most tokens used by the requests charged in one window."""
    return max(
        sum(c.used for c in admitted if first.at <= c.at < first.at + WINDOW) for first in admitted
    )


async def test_a_window_never_carries_more_than_the_limit_and_one_worst_case() -> None:
    """The adversary: every request uses its whole worst case while its
    estimate says it will use next to nothing."""
    rng = random.Random(7)

    def greedy() -> Ask:
        worst = rng.choice((50, 120, 300, 400))
        return Ask(worst, estimate=1, used=worst, seconds=rng.uniform(0.2, 12))

    clock = Clock()
    admitted = await closed_loop(LocalLimits(clock), clock, 12, 120, greedy)
    largest = max(c.worst for c in admitted)
    assert most_in_a_window(admitted) <= LIMIT + largest
    # The estimates were used: requests were charged less than their worst case.
    assert sum(c.charged < c.worst for c in admitted) >= 20


async def test_good_estimates_let_more_requests_into_a_window() -> None:
    """Requests that use a third of their worst case, estimated right: more
    of them fit than when each holds its worst case until it ends."""

    def served(estimated: bool) -> Callable[[], Ask]:
        return lambda: Ask(300, 100 if estimated else 300, used=100, seconds=4)

    counts = {}
    for estimated in (False, True):
        clock = Clock()
        admitted = await closed_loop(LocalLimits(clock), clock, 16, 120, served(estimated))
        assert most_in_a_window(admitted) <= LIMIT + 300
        counts[estimated] = len(admitted)
    print(f"\nrequests admitted in 120 s: {counts[False]} at worst case, {counts[True]} estimated")
    assert counts[True] >= counts[False] * 1.1


async def test_a_charge_leaves_the_keys_unreserved_tokens_when_it_settles() -> None:
    limits = LocalLimits(Clock())
    # 10 charged of 100: 90 left unreserved; the next one is charged that much.
    assert (await limits.reserve_tokens("k", "a", 10, 100, LIMIT, WINDOW)).charged == 10
    assert (await limits.reserve_tokens("k", "b", 10, 100, LIMIT, WINDOW)).charged == 90
    limits.settle_tokens("k", "a", 100)
    limits.settle_tokens("k", "b", 100)
    assert (await limits.reserve_tokens("k", "c", 10, 100, LIMIT, WINDOW)).charged == 10


async def test_a_charge_leaves_the_keys_unreserved_tokens_when_it_leaves_the_window() -> None:
    clock = Clock()
    limits = LocalLimits(clock)
    assert (await limits.reserve_tokens("k", "a", 10, 100, LIMIT, WINDOW)).charged == 10
    clock.now += WINDOW + 1
    # "a" is still running, but out of the window: nothing of it counts.
    assert (await limits.reserve_tokens("k", "b", 10, 100, LIMIT, WINDOW)).charged == 10
