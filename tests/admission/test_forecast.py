"""Admission's forecast (``app.admission.forecast``): when the drain rate
counts as measured, and the Retry-After a client refused for capacity is
told is when it will be admitted. On the policy alone, and in-process
(``tests.support.retry_after``) in front of a scripted engine, where a
client that waits the time it is told is admitted and one that comes back
well before (at a third of it) is not: the test decides when each request
the engine runs ends, so the scenario is fixed. Time is the real clock's,
with a second or more to spare wherever a busy machine could stretch a
sleep."""

import asyncio
import heapq
import itertools
import random
import time

import pytest

from app.admission.forecast import DrainRate
from app.admission.policy import AdmissionPolicy, QueueFull, Reservation
from tests.admission.test_policy import (
    add,
    admit,
    admit_all,
    backlog_draining_at_100_tokens_a_second,
    policy,
    waiter,
)
from tests.support.asgi import Exchange, InProcessGateway, in_process_gateway
from tests.support.retry_after import COMPLETIONS, admitted, answer, sleep_until, told
from tests.support.scripted_engine import MODEL, EngineCall
from tests.support.wait import wait_for

# One request runs at a time (max_concurrency 1), each for BLOCKER_SECONDS.
BLOCKER_SECONDS = 3.6

# Token ids (counted exactly): 40 tokens at worst.
BLOCKER = {"model": MODEL, "prompt": [11, 12, 13, 14], "max_tokens": 36}

# 1.75 times a blocker's tokens: at the rate the queue drains, a wait of
# 1.75 × 3.6 = 6.3 s, longer than the deadline, so refused at once and told
# the deadline's 5 s (its own tokens alone outlast the deadline: it is
# admitted only by finding room, so it is told its whole wait, capped); in
# fact it fits as soon as the running blocker ends, within 3.6 s.
LARGE = {**BLOCKER, "max_tokens": 66}

# Between a blocker's wait behind another (3.6 s) and LARGE's (6.3 s).
QUEUE_TIMEOUT = 4.95


def test_a_request_the_order_admits_at_once_is_not_refused_for_a_predicted_wait() -> None:
    """Drained at 100 tokens/s (one 100-token request a second), a
    400-token request is predicted to wait 4 s, past a 3 s deadline: refused
    while a request runs (told its whole wait, capped at the deadline: its
    own tokens alone outlast it), admitted once the engine is free — else
    the Retry-After it was told would never come true."""
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
    assert refused.value.reason == "objective_forecast"
    assert refused.value.retry_after == pytest.approx(3.0)
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
    assert await wait_for(lambda: gateway.metric("gateway_queue_depth") == 1, timeout=30)
    await sleep_until(first_started + BLOCKER_SECONDS)
    answer(first_call, BLOCKER)
    call = await asyncio.wait_for(gateway.engine.calls.get(), 30)
    started = time.monotonic()
    await first.done()
    assert first.status == 200
    return second, call, started


async def test_a_client_refused_for_capacity_is_told_when_it_will_be_admitted() -> None:
    # One request at a time, none waiting in the engine.
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

        # At a third of the time told (5 / 3 s), the blocker still runs (for
        # 3.6 s): refused again.
        await sleep_until(refused_at + early_wait / 3)
        assert not await admitted(gateway, LARGE, early)

        # After the time told, the blocker has ended: admitted at once.
        await sleep_until(refused_at + obedient_wait)
        assert await admitted(gateway, LARGE, obedient)
        assert ending.done()
        assert (await exchange.done()).status == 200


def test_a_queued_requests_eta_is_what_goes_before_it_and_its_own_at_the_drain_rate() -> None:
    p = policy(blocks=1)
    backlog_draining_at_100_tokens_a_second(p)
    queued = [add(p, waiter(tokens=100, at=6)) for _ in range(3)]
    # Whatever the backlog left queued goes first.
    before = len(list(p.waiters())) - 3
    place = p.place(queued[2])
    assert place is not None
    assert place.position == before + 3
    assert place.eta_s == pytest.approx((before + 3) * 1.0, rel=0.25)
    # Not queued (admitted, or never there): no place.
    assert p.place(waiter(tokens=100, at=6)) is None


def test_before_the_drain_rate_is_measured_the_eta_assumes_the_cache_turns_over() -> None:
    # A cache of 10 blocks of 100 (9 for requests): 1,000 tokens, turned over every 2 s.
    p = policy(blocks=9, block_size=100)
    add(p, waiter(tokens=1000, at=0))
    admit(p)
    second = add(p, waiter(tokens=500, at=1))
    place = p.place(second)
    assert place is not None
    assert place.position == 1
    assert place.eta_s == pytest.approx(1.0)


def test_a_backlogs_rate_counts_once_the_requests_it_found_in_flight_have_turned_over() -> None:
    """128 requests in flight when the backlog forms: the first 127 to be
    replaced say when they started, not how fast the engine drains; the
    128th completes the measure. A backlog gone before turning over
    measures nothing, and a measured rate is not diluted by the next
    backlog's start."""
    drain = DrainRate()
    drain.tick(0.0, backlog=True, in_flight=128)
    for i in range(127):
        drain.admitted(100)
        drain.tick(3.0 + i / 127, backlog=True, in_flight=128)
    assert drain.rate() is None
    drain.admitted(100)
    drain.tick(4.0, backlog=True, in_flight=128)
    assert drain.rate() == pytest.approx(128 * 100 / 4.0, rel=0.05)
    drain.tick(4.0, backlog=False, in_flight=128)
    measured = drain.rate()
    # A new burst: its first stretch, few admissions in a long while, is held aside.
    drain.tick(10.0, backlog=True, in_flight=128)
    drain.admitted(100)
    drain.tick(13.0, backlog=True, in_flight=128)
    assert drain.rate() == measured
    # It ends before turning over: nothing of it counts.
    drain.tick(13.5, backlog=False, in_flight=10)
    assert drain.rate() == measured
    fresh = DrainRate()
    fresh.tick(0.0, backlog=True, in_flight=128)
    fresh.admitted(100)
    fresh.tick(5.0, backlog=False, in_flight=128)
    assert fresh.rate() is None


def test_a_backlogs_first_turnover_counts_from_its_first_end() -> None:
    """Paced starts on a small cache: 15 requests in flight when the backlog
    forms, 3 more admitted into the room the cache's future leaves before
    any ends, then one every 72 ms as they end. Before the first end nothing
    could drain; counted from the backlog's start, the first turnover reads
    the engine at half its drain."""
    drain = DrainRate()
    drain.tick(0.0, backlog=True, in_flight=15)
    for k in range(3):
        drain.tick(0.3 * (k + 1), backlog=True, in_flight=16 + k)
        drain.admitted(340)
    drain.tick(1.3, backlog=True, in_flight=18)
    drain.ended()
    for k in range(18):
        drain.tick(1.3 + 0.072 * (k + 1), backlog=True, in_flight=18)
        assert drain.rate() is None  # not turned over yet
        drain.admitted(340)
    assert drain.rate() == pytest.approx(340 / 0.072, rel=0.01)
    # Later ends start nothing over.
    drain.ended()
    drain.tick(2.7, backlog=True, in_flight=18)
    drain.admitted(340)
    assert drain.rate() == pytest.approx(18 * 340 / (2.7 - 1.3 - 0.072), rel=0.01)


class Streams:
    """Closed-loop users' streams on the policy: each admitted request runs
    for a random time in [low, high] seconds, then is released."""

    def __init__(self, p: AdmissionPolicy, low: float, high: float, seed: int) -> None:
        self._p = p
        self._durations = random.Random(seed)
        self._low, self._high = low, high
        self._ends: list[tuple[float, int, Reservation]] = []
        self._order = itertools.count()
        self.expired = 0

    def admit(self, now: float) -> None:
        """Admit what the policy admits now; each starts its stream. Those
        whose objective passed in the queue are counted in ``expired``."""
        admitted, expired = self._p.pop_admissible(now)
        self.expired += len(expired)
        for _, reservation in admitted:
            end = now + self._durations.uniform(self._low, self._high)
            heapq.heappush(self._ends, (end, next(self._order), reservation))

    def running(self) -> set[int]:
        return {id(reservation) for _, _, reservation in self._ends}

    def end(self, now: float) -> list[Reservation]:
        """Release the streams over by ``now``, then admit; the released."""
        ended = []
        while self._ends and self._ends[0][0] <= now:
            ended.append(heapq.heappop(self._ends)[2])
        for reservation in ended:
            self._p.release(reservation)
        self.admit(now)
        return ended


def test_a_burst_on_a_fresh_gateway_is_not_refused_for_what_its_first_streams_say() -> None:
    """256 users at once on a fresh gateway in front of one engine running
    128 sequences, each stream 3.5 to 4.5 s, every user back the moment its
    stream ends. The first streams end 3.5 s into the burst, a few at a
    time: a rate taken from them (a few requests in 3.5 s, where the engine
    drains 128 every 4 s) would predict minutes of wait and refuse the users
    coming back. Nothing is refused, there is no rate until the requests in
    flight have turned over, and the rate then is the engine's."""
    p = policy(blocks=10_000, block_size=16, max_sequences=128, max_wait=30.0)
    tokens = 100 + 256
    streams = Streams(p, 3.5, 4.5, seed=7)

    def user_sends(now: float) -> None:
        add(p, waiter(tokens=tokens, at=now))  # QueueFull fails the test
        streams.admit(now)

    for _ in range(256):
        user_sends(0.0)
    assert p.queued == 128
    now, first_cohort = 0.0, streams.running()
    while now < 20.0:
        now = round(now + 0.05, 2)
        ended = streams.end(now)
        first_cohort -= {id(r) for r in ended}
        for _ in ended:
            user_sends(now + 0.002)
        if len(first_cohort) > 8:
            # Most of the requests in flight when the backlog formed still run.
            assert p.forecast.rate() is None
    engine_rate = 128 * tokens / 4.0
    assert p.forecast.rate() == pytest.approx(engine_rate, rel=0.2)


def test_a_queue_at_the_deadlines_edge_is_not_refused_for_its_forecast() -> None:
    """256 users on 128 sequences whose streams last 4.2 to 5 s, a 5 s
    deadline, every user back the moment its stream ends or it is refused:
    the queue's wait is one stream's length, at the deadline's edge, and
    the forecast predicts about that. Refused at the deadline itself, the
    same users would be turned away again and again (vLLM alone serves them
    all within about 5 s); sure only past a fifth more, nobody is."""
    p = policy(blocks=10_000, block_size=16, max_sequences=128, max_wait=5.0)
    tokens = 100 + 256
    streams = Streams(p, 4.2, 5.0, seed=11)
    predicted: list[float] = []
    refusals = 0

    def user_sends(now: float) -> bool:
        wait = p.forecast.wait("normal", tokens, "t")
        if wait is not None:
            predicted.append(wait)
        try:
            add(p, waiter(tokens=tokens, at=now))
        except QueueFull:
            return False
        streams.admit(now)
        return True

    retries = sum(not user_sends(0.0) for _ in range(256))
    now = 0.0
    while now < 40.0:
        now = round(now + 0.05, 2)
        expired = streams.expired
        ended = len(streams.end(now))
        # A user whose objective passed in the queue is back at once too.
        sending, retries = ended + streams.expired - expired + retries, 0
        for _ in range(sending):
            if not user_sends(now + 0.002):
                refusals += 1
                retries += 1
    # The forecast was measured, and it saw the edge: waits about the deadline.
    assert len(predicted) > 500
    assert max(predicted) >= 4.9
    assert refusals == 0
    assert p.queued > 100


def test_a_request_is_refused_when_its_wait_and_a_first_tokens_lag_miss_its_own_objective() -> None:
    """The queue drains 100 tokens a second and 300 are due first: a new
    request waits about 4 s. A 10 s objective is met; a 4.5 s one is met only while
    a first token comes soon after admission: once admitted streams have
    taken 2 s to their first token, it is refused at arrival (4 s wait +
    2 s > 4.5 s, more than a fifth past what it leaves)."""
    p = policy(blocks=1)
    backlog_draining_at_100_tokens_a_second(p)
    assert p.forecast.rate() == pytest.approx(100, rel=0.2)
    # Three more due before either new one (earliest deadline first).
    for _ in range(3):
        add(p, waiter(tokens=100, at=6, objective=4.0))
    add(p, waiter(tokens=100, at=6, objective=10.0))
    add(p, waiter(tokens=100, at=6, objective=4.5))
    for _ in range(40):
        p.first_token(2.0)
    assert p.first_token_lag == pytest.approx(2.0, rel=0.02)
    add(p, waiter(tokens=100, at=6, objective=10.0))
    with pytest.raises(QueueFull) as refused:
        add(p, waiter(tokens=100, at=6, objective=4.5))
    assert refused.value.reason == "objective_forecast"


def test_a_waiter_expires_once_its_objective_leaves_no_time_for_a_first_token() -> None:
    """Queued with a 3 s objective behind a request that runs on: with a 1 s
    lag learned, it is taken out at 2 s, not 3 s."""
    p = policy(blocks=1)
    add(p, waiter(tokens=100, at=0))
    admit_all(p, now=0.0)
    for _ in range(60):
        p.first_token(1.0)
    late = add(p, waiter(tokens=100, at=0, objective=3.0))
    assert p.pop_admissible(1.9) == ([], [])
    assert p.pop_admissible(2.01) == ([], [late])
