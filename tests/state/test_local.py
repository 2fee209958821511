"""Limits kept in this process: a moving window of requests, a settleable
log of tokens, concurrent slots."""

from app.state.local import LocalLimits


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_tokens_are_held_in_a_sliding_window() -> None:
    clock = Clock()
    limits = LocalLimits(clock)
    assert (await limits.reserve_tokens("k", "a", 600, 1000, 60)).allowed
    clock.now += 30
    refused = await limits.reserve_tokens("k", "b", 500, 1000, 60)
    assert not refused.allowed
    assert refused.remaining == 400
    # "a" leaves the window 60 s after it was charged: 30 s from now.
    assert refused.retry_after == 30
    clock.now += 30
    assert (await limits.reserve_tokens("k", "b", 500, 1000, 60)).allowed


async def test_settling_replaces_the_reservation_with_what_was_used() -> None:
    clock = Clock()
    limits = LocalLimits(clock)
    await limits.reserve_tokens("k", "a", 900, 1000, 60)
    assert not (await limits.reserve_tokens("k", "b", 200, 1000, 60)).allowed
    limits.settle_tokens("k", "a", 100)
    verdict = await limits.reserve_tokens("k", "b", 200, 1000, 60)
    assert verdict.allowed
    assert verdict.remaining == 700
    # A charge that already left the window is not settled into the new one.
    clock.now += 61
    limits.settle_tokens("k", "b", 5000)
    assert (await limits.reserve_tokens("k", "c", 1000, 1000, 60)).allowed


async def test_keys_do_not_share_limits() -> None:
    limits = LocalLimits(Clock())
    await limits.reserve_tokens("a", "1", 1000, 1000, 60)
    assert (await limits.reserve_tokens("b", "1", 1000, 1000, 60)).allowed


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
