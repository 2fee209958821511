"""Room made for a higher class (``app.admission.eviction``): on the policy
alone, with streams whose progress the test sets."""

from app.admission.budget import Reservation
from app.admission.eviction import Eviction, EvictionChecks
from app.admission.policy import AdmissionPolicy
from tests.admission.test_policy import add, admit, admit_all, policy, waiter


class Gauge:
    def __init__(self, sent: int) -> None:
        self.events = sent
        self.counted_tokens: float | None = float(sent)
        self.first_token_at: float | None = 0.0


def running(
    p: AdmissionPolicy, count: int, priority: str, output: int, sent: int
) -> list[Reservation]:
    """``count`` streams of ``priority`` admitted and running, ``sent`` of
    their ``output`` tokens written, each with a stop that records itself."""
    for _ in range(count):
        add(p, waiter(priority=priority, tokens=output + 10, output=output))
    admitted = [r for _, r in admit_all(p)]
    assert len(admitted) == count
    for reservation in admitted:
        reservation.stream = Gauge(sent)
        reservation.stop = lambda error, r=reservation: stopped.append(r)
    return admitted


stopped: list[Reservation] = []


def full_of_low(
    seconds_per_token: float | None = 0.01,
) -> tuple[AdmissionPolicy, list[Reservation]]:
    """An engine of four sequences, all running sheddable low streams 100 of
    1,000 tokens in: each 9 s from its end at 0.01 s a token."""
    stopped.clear()
    p = policy(blocks=1000, max_sequences=4)
    lows = running(p, 4, "low", output=1000, sent=100)
    p.engines["e0"].itl.seconds_per_token = seconds_per_token
    return p, lows


def test_a_blocked_higher_class_has_the_newest_sheddable_request_stopped_once() -> None:
    p, lows = full_of_low()
    high = add(p, waiter(priority="high", tokens=50, output=40, objective=1.0))
    assert admit(p) == []
    (eviction,) = p.take_evictions()
    assert (eviction.victim, eviction.waiter) == (lows[-1], high)
    # Once per request: nothing more is stopped while it waits for that room.
    assert admit(p) == []
    assert p.take_evictions() == []
    p.release(lows[-1])
    assert admit(p) == [high]


def test_nothing_is_stopped_when_a_running_request_ends_in_time() -> None:
    """The same engine, its streams 5 tokens from their end: one ends within
    the second the high request has; it waits for it."""
    stopped.clear()
    p = policy(blocks=1000, max_sequences=4)
    running(p, 4, "low", output=1000, sent=995)
    p.engines["e0"].itl.seconds_per_token = 0.01
    add(p, waiter(priority="high", tokens=50, output=40, objective=1.0))
    assert admit(p) == []
    assert p.take_evictions() == []


def test_an_engine_whose_pace_is_not_known_yet_is_not_counted_on() -> None:
    p, _ = full_of_low(seconds_per_token=None)
    add(p, waiter(priority="high", tokens=50, output=40, objective=1.0))
    admit(p)
    assert len(p.take_evictions()) == 1


def test_only_a_lower_sheddable_class_is_stopped() -> None:
    """Normal requests fill the engine: not sheddable, nothing is stopped
    for a high one; low requests are not stopped for another low one."""
    stopped.clear()
    p = policy(blocks=1000, max_sequences=4)
    running(p, 4, "normal", output=1000, sent=100)
    add(p, waiter(priority="high", tokens=50, output=40, objective=1.0))
    admit(p)
    assert p.take_evictions() == []
    p, _ = full_of_low()
    add(p, waiter(priority="low", tokens=50, output=40, objective=1.0))
    admit(p)
    assert p.take_evictions() == []


def test_an_engine_has_at_most_so_many_stopped_a_second() -> None:
    """Two a second: of three high requests blocked at once, two have a low
    one stopped for them now, the third only once a second has passed."""
    p, _ = full_of_low()
    p.evictor._per_second = 2
    highs = [add(p, waiter(priority="high", tokens=50, output=40, objective=5.0)) for _ in range(3)]
    made: list[Eviction] = []
    for _ in range(3):
        admit(p, now=0.1)
        for eviction in p.take_evictions():
            made.append(eviction)
            p.release(eviction.victim)
    assert [e.waiter for e in made] == highs[:2]
    admit(p, now=1.2)
    assert [e.waiter for e in p.take_evictions()] == [highs[2]]


def test_an_eviction_is_confirmed_when_the_engine_ran_no_more_and_the_request_started() -> None:
    p, _lows = full_of_low()
    high = add(p, waiter(priority="high", tokens=50, output=40, objective=1.0))
    admit(p)
    (eviction,) = p.take_evictions()
    checks = EvictionChecks()
    checks.watch(eviction, running_before=4)
    # Not yet given back: no outcome at this report.
    assert checks.report("e0", 5) == []
    p.release(eviction.victim)
    checks.admitted(high, "e0")
    assert checks.report("e0", 4) == ["confirmed"]


def test_an_eviction_whose_request_left_unadmitted_is_wasted() -> None:
    p, _lows = full_of_low()
    high = add(p, waiter(priority="high", tokens=50, output=40, objective=1.0))
    admit(p)
    (eviction,) = p.take_evictions()
    checks = EvictionChecks()
    checks.watch(eviction, running_before=4)
    p.release(eviction.victim)
    # Still queued (a paced start may come later): no outcome yet.
    assert checks.report("e0", 3) == []
    # It left the queue without being admitted there.
    checks.left(high)
    assert checks.report("e0", 3) == ["wasted"]


def test_an_eviction_after_which_the_engine_ran_more_is_wasted() -> None:
    p, _lows = full_of_low()
    high = add(p, waiter(priority="high", tokens=50, output=40, objective=1.0))
    admit(p)
    (eviction,) = p.take_evictions()
    checks = EvictionChecks()
    checks.watch(eviction, running_before=4)
    p.release(eviction.victim)
    checks.admitted(high, "e0")
    # The stopped request still runs beside the one it was stopped for.
    assert checks.report("e0", 5) == ["wasted"]
