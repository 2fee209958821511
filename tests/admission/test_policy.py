"""The admission policy on its own: no I/O, no clock, no engine."""

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.admission.policy import AdmissionPolicy, PolicyConfig, QueueFull, Reservation, Waiter


def policy(blocks: int = 10, block_size: int = 100, **config: float) -> AdmissionPolicy:
    p = AdmissionPolicy(PolicyConfig(**config))  # type: ignore[arg-type]
    p.set_capacity(blocks, block_size)
    return p


def waiter(
    tenant: str = "t", priority: str = "normal", tokens: int = 100, at: float = 0.0
) -> Waiter:
    return Waiter(tenant=tenant, priority=priority, tokens=tokens, arrival=at, deadline=at + 30)


def add(p: AdmissionPolicy, w: Waiter) -> Waiter:
    p.enqueue(w, p.blocks_for(w.tokens), now=w.arrival)
    return w


def admit(p: AdmissionPolicy, now: float = 0.0) -> list[Waiter]:
    admitted, _ = p.pop_admissible(now)
    return [w for w, _ in admitted]


def test_demand_is_counted_in_whole_blocks() -> None:
    p = policy(block_size=128)
    assert p.blocks_for(300) == 3
    assert p.blocks_for(256) == 2
    assert p.blocks_for(1) == 1


def test_requests_are_admitted_while_their_blocks_fit() -> None:
    p = policy(blocks=10)
    first = [add(p, waiter(tokens=300)) for _ in range(4)]
    assert admit(p) == first[:3]  # 3 + 3 + 3 blocks of 10; the fourth waits
    assert p.reserved_blocks == 9
    assert p.queued == 1


def test_priority_classes_go_first() -> None:
    p = policy(blocks=1)
    blocker = add(p, waiter(tokens=100))
    assert admit(p) == [blocker]
    low = add(p, waiter("a", "low", at=1))
    normal = add(p, waiter("b", "normal", at=2))
    high = add(p, waiter("c", "high", at=3))
    order = []
    reservation = Reservation(tokens=100, blocks=1)
    p.in_flight, p.reserved_blocks = 1, 1
    for _ in range(3):
        p.release(reservation)
        reservation = Reservation(tokens=100, blocks=1)
        got = admit(p)
        order += got
    assert order == [high, normal, low]


def test_the_head_waits_and_nothing_overtakes_it() -> None:
    p = policy(blocks=10)
    add(p, waiter(tokens=300))
    add(p, waiter(tokens=300))
    assert len(admit(p)) == 2
    big = add(p, waiter("a", tokens=500, at=1))
    small = add(p, waiter("b", tokens=100, at=2))
    assert admit(p) == []  # 6 + 5 > 10: big waits, and small may not jump it
    assert [w for w in p.waiters()] == [big, small]


def test_an_oversized_request_runs_alone_rather_than_never() -> None:
    p = policy(blocks=10)
    huge = add(p, waiter(tokens=5000))
    assert admit(p) == [huge]


def test_no_request_is_charged_more_than_half_the_budget() -> None:
    p = policy(blocks=10)
    add(p, waiter(tokens=400))
    huge = add(p, waiter(tokens=5000, at=1))
    assert admit(p)[-1] == huge
    assert p.reserved_blocks == 4 + 5


def test_no_single_request_halts_admission_until_the_engine_empties() -> None:
    """A head that asks for the whole context waits only until half the
    budget is free, not until nothing is in flight."""
    p = policy(blocks=10)
    for i in range(6):
        add(p, waiter(f"t{i}", tokens=100))
    running = admit(p)
    assert len(running) == 6
    huge = add(p, waiter("huge", tokens=5000, at=1))
    small = add(p, waiter("small", tokens=100, at=2))
    assert admit(p) == []
    p.release(Reservation(tokens=100, blocks=1))
    assert admit(p) == [huge]
    assert p.in_flight == 6
    p.release(Reservation(tokens=100, blocks=1))
    assert admit(p) == [small]


def test_a_batch_counts_as_its_sequences_against_the_cap() -> None:
    p = policy(blocks=100, max_concurrency=4)
    first = add(p, Waiter("a", "normal", 100, arrival=0, deadline=30, sequences=2))
    second = add(p, Waiter("b", "normal", 100, arrival=0, deadline=30, sequences=16))
    third = add(p, Waiter("c", "normal", 100, arrival=0, deadline=30, sequences=1))
    # 16 sequences are charged half the cap (2): 2 + 2 = 4 fills it.
    assert admit(p) == [first, second]
    assert p.running_sequences == 4
    assert [w for w in p.waiters()] == [third]


def test_tenants_share_admitted_tokens_fairly() -> None:
    """Tenant A queues ten times what B queues; while both wait, they
    alternate by tokens admitted, not by requests."""
    p = policy(blocks=1000, max_concurrency=1)
    for i in range(100):
        add(p, waiter("A", tokens=100, at=i))
    for i in range(10):
        add(p, waiter("B", tokens=100, at=100 + i))
    served: dict[str, int] = {"A": 0, "B": 0}
    while any(w.tenant == "B" for w in p.waiters()):
        (w,) = admit(p)
        served[w.tenant] += w.tokens
        p.release(Reservation(tokens=w.tokens, blocks=w.blocks))
    assert served["B"] / (served["A"] + served["B"]) >= 0.45


def test_fair_share_is_measured_in_tokens() -> None:
    p = policy(blocks=1000, max_concurrency=1)
    for i in range(20):
        add(p, waiter("long", tokens=1000, at=i))
        add(p, waiter("short", tokens=100, at=i))
    served: dict[str, int] = {"long": 0, "short": 0}
    for _ in range(22):
        (w,) = admit(p)
        served[w.tenant] += w.tokens
        p.release(Reservation(tokens=w.tokens, blocks=w.blocks))
    # Twenty short requests weigh about as much as two long ones.
    assert served["short"] >= 1500
    assert served["long"] <= 3000


def test_an_idle_tenant_does_not_bank_credit() -> None:
    p = policy(blocks=1000, max_concurrency=1)
    for i in range(30):
        add(p, waiter("busy", tokens=100, at=i))
        (w,) = admit(p)
        p.release(Reservation(tokens=w.tokens, blocks=w.blocks))
    for i in range(5):
        add(p, waiter("busy", tokens=100, at=100 + i))
    for i in range(5):
        add(p, waiter("late", tokens=100, at=200 + i))
    first_six = []
    for _ in range(6):
        (w,) = admit(p)
        first_six.append(w.tenant)
        p.release(Reservation(tokens=w.tokens, blocks=w.blocks))
    # "late" was idle while "busy" was served, yet it does not get the next
    # five turns in a row: the two alternate.
    assert first_six.count("busy") >= 2


def test_waiters_past_their_deadline_are_expired_not_admitted() -> None:
    p = policy(blocks=10)
    add(p, waiter(tokens=1000))
    assert len(admit(p)) == 1
    late = add(p, waiter("a", tokens=100, at=0))
    on_time = add(p, waiter("b", tokens=100, at=20))
    p.release(Reservation(tokens=1000, blocks=10))
    p.in_flight, p.reserved_blocks = 0, 0
    admitted, expired = p.pop_admissible(now=35.0)
    assert expired == [late]
    assert [w for w, _ in admitted] == [on_time]


def test_a_full_queue_refuses() -> None:
    p = policy(blocks=1, max_queue_depth=2)
    add(p, waiter())
    add(p, waiter())
    with pytest.raises(QueueFull):
        add(p, waiter())


def test_the_queue_is_bounded_in_bytes_too() -> None:
    p = policy(blocks=1, max_queue_bytes=1000)
    big = Waiter("a", "normal", 100, arrival=0, deadline=30, size=600)
    add(p, big)
    with pytest.raises(QueueFull):
        add(p, Waiter("b", "normal", 100, arrival=0, deadline=30, size=600))
    assert p.remove(big)
    assert p.queued_bytes == 0
    add(p, Waiter("b", "normal", 100, arrival=0, deadline=30, size=600))


def test_preemptions_shrink_the_budget() -> None:
    p = policy(blocks=100, initial_factor=2.0, backoff=0.7)
    p.observe_engine(preemptions_total=0, kv_usage=0.5)
    p.observe_engine(preemptions_total=3, kv_usage=0.99)
    assert p.factor == pytest.approx(1.4)
    p.observe_engine(preemptions_total=5, kv_usage=0.99)
    assert p.factor == pytest.approx(0.98)
    for _ in range(20):
        p.observe_engine(preemptions_total=100 + _, kv_usage=0.99)
    assert p.factor == pytest.approx(0.9)  # the floor


def test_a_persistent_queue_with_headroom_opens_the_budget() -> None:
    p = policy(blocks=10, initial_factor=1.0, patience=2, step=0.1)
    add(p, waiter(tokens=1000))
    admit(p)
    add(p, waiter(tokens=500))
    budgets: list[int] = []
    for _ in range(10):
        p.observe_engine(preemptions_total=0, kv_usage=0.4)
        budgets.append(p.budget_blocks or 0)
    assert budgets[-1] > budgets[0] > 0
    assert p.factor == pytest.approx(1.5)


def test_no_headroom_or_no_queue_means_no_growth() -> None:
    p = policy(blocks=10)
    for _ in range(10):
        p.observe_engine(preemptions_total=0, kv_usage=0.2)  # nothing queued
    assert p.factor == 1.0
    add(p, waiter(tokens=1000))
    admit(p)
    add(p, waiter(tokens=500))
    for _ in range(10):
        p.observe_engine(preemptions_total=0, kv_usage=0.95)  # engine full
    assert p.factor == 1.0


def test_growth_stops_at_what_completed_requests_justify() -> None:
    p = policy(blocks=10)
    # Requests reserved 1000 tokens (100 prompt + 900 output) and wrote 800:
    # on average each held 100 + 800 / 2 = 500, so overcommit up to 2x.
    for _ in range(10):
        p.in_flight += 1
        p.reserved_blocks += 10
        p.release(Reservation(tokens=1000, blocks=10), used=(100, 800))
    add(p, waiter(tokens=1000))
    p.in_flight, p.reserved_blocks = 1, 10
    for _ in range(100):
        p.observe_engine(preemptions_total=0, kv_usage=0.3)
    assert p.factor == pytest.approx(2.0)


def backlog_draining_at_100_tokens_a_second(p: AdmissionPolicy) -> None:
    """One request of 100 tokens (one block) runs at a time for one second
    while others wait: the queue drains at 100 tokens/s."""
    for _ in range(3):
        add(p, waiter(tokens=100, at=0))
    admit(p, now=0.0)  # admitted without waiting: not a measure of draining
    for second in range(1, 6):
        p.release(Reservation(tokens=100, blocks=1))
        p.in_flight, p.reserved_blocks = 0, 0
        admit(p, now=float(second))
        add(p, waiter(tokens=100, at=second))


def test_the_drain_rate_is_measured_while_requests_wait() -> None:
    p = policy(blocks=1)
    assert p.drain_rate() is None
    backlog_draining_at_100_tokens_a_second(p)
    rate = p.drain_rate()
    assert rate == pytest.approx(100, rel=0.2)


def test_retry_after_is_the_predicted_wait() -> None:
    p = policy(blocks=1)
    backlog_draining_at_100_tokens_a_second(p)
    for _ in range(4):
        add(p, waiter(tokens=100, at=6))
    # 600 tokens queued, draining at ~100 tokens/s.
    assert p.retry_after(now=6.0) == pytest.approx(6.0, rel=0.25)


def test_clients_refused_together_are_told_to_come_back_spread_out() -> None:
    p = policy(blocks=1)
    backlog_draining_at_100_tokens_a_second(p)
    hints = [p.retry_after(now=6.0, tokens=100) for _ in range(5)]
    # Each later client comes back about one request's drain time later.
    gaps = [b - a for a, b in itertools.pairwise(hints)]
    assert all(gap == pytest.approx(1.0, rel=0.25) for gap in gaps)
    assert hints[0] == pytest.approx(3.0, rel=0.25)  # 200 queued + its own 100


def test_retry_after_is_capped() -> None:
    p = policy(blocks=1, max_retry_after=10)
    backlog_draining_at_100_tokens_a_second(p)
    assert max(p.retry_after(now=6.0, tokens=1000) for _ in range(5)) <= 10


def test_a_request_that_would_outwait_its_deadline_is_refused_at_once() -> None:
    p = policy(blocks=1, max_wait=4.0)
    backlog_draining_at_100_tokens_a_second(p)
    add(p, waiter(tokens=100, at=6))  # ~3 s to wait: fine
    with pytest.raises(QueueFull) as refused:
        add(p, waiter(tokens=200, at=6))  # ~5 s: longer than the deadline
    assert refused.value.retry_after >= 5.0
    # A high-priority request only waits behind high-priority work.
    add(p, waiter(tokens=200, priority="high", at=6))


def test_before_a_rate_is_measured_the_cache_is_assumed_to_turn_over_in_two_seconds() -> None:
    p = policy(blocks=10, block_size=100)  # 1,000 tokens: 500 tokens/s assumed
    for _ in range(5):
        add(p, waiter(tokens=100))
    hints = [p.retry_after(now=0.0, tokens=100) for _ in range(3)]
    assert hints == pytest.approx([1.2, 1.4, 1.6])
    assert AdmissionPolicy().retry_after(now=0.0) == 2.0


# --- no reservation leaks, whatever happens ---------------------------------

actions = st.lists(
    st.one_of(
        st.tuples(
            st.just("arrive"),
            st.sampled_from("ABC"),
            st.sampled_from(["high", "normal", "low"]),
            st.integers(1, 900),
            st.integers(1, 8),
        ),
        st.tuples(st.just("dispatch")),
        st.tuples(st.just("cancel"), st.integers(0, 50)),
        st.tuples(st.just("complete"), st.integers(0, 50), st.booleans()),
        st.tuples(st.just("engine"), st.integers(0, 3), st.floats(0, 1)),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(actions)
def test_random_sequences_never_leak_or_double_release(steps: list[tuple[object, ...]]) -> None:
    p = policy(blocks=20, block_size=100, max_concurrency=5, max_queue_depth=10)
    queued: list[Waiter] = []
    live: list[Reservation] = []
    done: list[Reservation] = []
    preemptions = 0
    clock = 0.0
    for step in steps:
        clock += 1.0
        kind = step[0]
        if kind == "arrive":
            _, tenant, priority, tokens, sequences = step
            w = Waiter(
                str(tenant),
                str(priority),
                int(tokens),  # type: ignore[call-overload]
                arrival=clock,
                deadline=clock + 20,
                sequences=int(sequences),  # type: ignore[call-overload]
                size=int(tokens),  # type: ignore[call-overload]
            )
            try:
                add(p, w)
                queued.append(w)
            except QueueFull:
                pass
        elif kind == "dispatch":
            admitted, expired = p.pop_admissible(clock)
            for w, reservation in admitted:
                queued.remove(w)
                live.append(reservation)
            for w in expired:
                queued.remove(w)
        elif kind == "cancel" and queued:
            w = queued.pop(int(step[1]) % len(queued))  # type: ignore[call-overload]
            assert p.remove(w)
            assert not p.remove(w)
        elif kind == "complete" and (live or done):
            if step[2] and done:
                assert not p.release(done[int(step[1]) % len(done)])  # type: ignore[call-overload]
            elif live:
                reservation = live.pop(int(step[1]) % len(live))  # type: ignore[call-overload]
                assert p.release(reservation, used=(10, reservation.tokens // 2))
                done.append(reservation)
        elif kind == "engine":
            preemptions += int(step[1])  # type: ignore[call-overload]
            p.observe_engine(preemptions, float(step[2]))  # type: ignore[arg-type]

        assert p.in_flight == len(live) >= 0
        assert p.running_sequences == sum(r.sequences for r in live) >= 0
        assert p.reserved_blocks == sum(r.blocks for r in live) >= 0
        assert p.queued == len(queued)
        assert p.queued_bytes == sum(w.size for w in queued)
        assert sorted(map(id, p.waiters())) == sorted(map(id, queued))
        assert p.config.min_factor <= p.factor <= p.config.max_factor
        assert math.isfinite(p.retry_after(clock))

    for reservation in live:
        assert p.release(reservation)
    assert (p.in_flight, p.reserved_blocks, p.running_sequences) == (0, 0, 0)
