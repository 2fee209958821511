"""The classes benchmark's load (``benchmarks.classes.load``): the arrival
schedule, the window's cut, closed-loop users honouring Retry-After. A fake
send, no engine; a second or less of real time."""

import asyncio
import time

from benchmarks.classes.load import Arrival, User, closed_loop, open_loop, poisson_arrivals, within
from benchmarks.classes.outcomes import CUT
from benchmarks.harness import Call


def test_the_schedule_is_the_same_for_the_same_seed() -> None:
    shares = [("tight", 0.2), ("loose", 0.8)]
    assert poisson_arrivals(5.0, 60.0, shares, 1) == poisson_arrivals(5.0, 60.0, shares, 1)
    assert poisson_arrivals(5.0, 60.0, shares, 1) != poisson_arrivals(5.0, 60.0, shares, 2)


def test_arrivals_come_at_the_rate_and_in_the_shares_asked() -> None:
    arrivals = poisson_arrivals(20.0, 500.0, [("tight", 0.2), ("loose", 0.8)], 5)
    assert 9_500 < len(arrivals) < 10_500
    tight = sum(1 for a in arrivals if a.label == "tight")
    assert 0.18 < tight / len(arrivals) < 0.22
    assert all(0 <= a.at < 500.0 for a in arrivals)
    assert [a.at for a in arrivals] == sorted(a.at for a in arrivals)


async def test_a_request_still_running_when_the_window_closes_is_cut() -> None:
    async def slow() -> Call:
        await asyncio.sleep(5)
        return Call(status=200, started=0.0)

    call = await within(time.perf_counter() + 0.05, slow)
    assert call.status == CUT


async def test_closed_loop_users_come_back_after_retry_after_and_stop_with_the_schedule() -> None:
    sent: list[float] = []

    async def refused() -> Call:
        sent.append(time.perf_counter())
        c = Call(status=429, started=time.perf_counter(), finished=time.perf_counter())
        c.retry_after = 0.2
        return c

    t0 = time.perf_counter()
    calls = await closed_loop([User("bulk", refused)], t0, 0.5, 1.0)
    # At 0, 0.2 and 0.4 s; nothing after the schedule's 0.5 s.
    assert len(calls) == 3
    assert all(c.label == "bulk" for c in calls)
    assert sent[-1] - t0 < 0.5


async def test_open_loop_sends_every_arrival_at_its_offset_whatever_came_before() -> None:
    async def hangs() -> Call:
        await asyncio.sleep(5)
        return Call(status=200, started=0.0)

    async def quick() -> Call:
        return Call(status=200, started=time.perf_counter(), finished=time.perf_counter())

    arrivals = [Arrival(0.0, "slow"), Arrival(0.05, "fast"), Arrival(0.1, "fast")]
    t0 = time.perf_counter()
    calls = await open_loop(arrivals, {"slow": hangs, "fast": quick}, t0, 0.3)
    assert [c.label for c in calls] == ["slow", "fast", "fast"]
    assert [c.status for c in calls] == [CUT, 200, 200]
    assert time.perf_counter() - t0 < 1.0
