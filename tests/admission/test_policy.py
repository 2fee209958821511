"""The admission policy on its own: one queue, one budget per engine, no
I/O, no clock."""

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.admission.budget import BudgetConfig
from app.admission.classes import default_table
from app.admission.policy import AdmissionPolicy, PolicyConfig, QueueFull, Reservation, Waiter
from app.admission.recompute import EngineReading
from app.engine.view import FixedView
from app.routing.block_index import BlockIndex, PromptBlocks
from app.routing.cached import ReportedCache
from tests.support.routing import PrefixRoute, prefix_router


def policy(
    blocks: int = 10, block_size: int = 100, engines: int = 1, **config: float | str
) -> AdmissionPolicy:
    budget_fields = set(BudgetConfig.__dataclass_fields__)
    budget = BudgetConfig(**{k: v for k, v in config.items() if k in budget_fields})  # type: ignore[arg-type]
    rest: dict[str, object] = {k: v for k, v in config.items() if k not in budget_fields}
    # Every class promises the queue's deadline, as the settings' defaults do.
    rest.setdefault("classes", default_table(float(config.get("max_wait", 30.0))))
    p = AdmissionPolicy(PolicyConfig(budget=budget, **rest))  # type: ignore[arg-type]
    for i in range(engines):
        e = p.add_engine(FixedView(f"e{i}", routable=True, models=frozenset({"m"})))
        # ``blocks`` the requests can hold, and the engine's null block.
        e.set_capacity(blocks + 1, block_size)
    return p


def view(p: AdmissionPolicy, engine: str) -> FixedView:
    """The engine's view, to change by hand (the pool's, in the gateway)."""
    found = p.engines[engine].view
    assert isinstance(found, FixedView)
    return found


def waiter(
    tenant: str = "t",
    priority: str = "normal",
    tokens: int = 100,
    at: float = 0.0,
    **fields: object,
) -> Waiter:
    return Waiter(tenant, priority, tokens, arrival=at, model="m", **fields)  # type: ignore[arg-type]


def add(p: AdmissionPolicy, w: Waiter) -> Waiter:
    """Queue ``w``, promised its class's objective unless it has its own
    (as the controller does)."""
    if math.isinf(w.objective):
        w.objective = p.config.classes[w.priority].objective
    if math.isinf(w.deadline):
        w.deadline = w.arrival + w.objective
    p.enqueue(w, now=w.arrival)
    return w


def admit(p: AdmissionPolicy, now: float = 0.0) -> list[Waiter]:
    admitted, _ = p.pop_admissible(now)
    return [w for w, _ in admitted]


def admit_all(p: AdmissionPolicy, now: float = 0.0) -> list[tuple[Waiter, Reservation]]:
    admitted, _ = p.pop_admissible(now)
    return admitted


def test_requests_are_admitted_while_their_blocks_fit() -> None:
    p = policy(blocks=10)
    first = [add(p, waiter(tokens=300)) for _ in range(4)]
    assert admit(p) == first[:3]  # 3 + 3 + 3 blocks of 10; the fourth waits
    assert p.engines["e0"].reserved_blocks == 9
    assert p.queued == 1


def test_the_head_waits_and_nothing_overtakes_it() -> None:
    p = policy(blocks=10)
    add(p, waiter(tokens=300))
    add(p, waiter(tokens=300))
    assert len(admit(p)) == 2
    big = add(p, waiter("a", tokens=500, at=1))
    small = add(p, waiter("b", tokens=100, at=2))
    assert admit(p) == []  # 6 + 5 > 10: big waits, and small may not jump it
    assert list(p.waiters()) == [big, small]


def test_no_single_request_halts_admission_until_the_engine_empties() -> None:
    """A head that asks for the whole context waits only until half the
    budget is free, not until nothing is in flight."""
    p = policy(blocks=10)
    for i in range(6):
        add(p, waiter(f"t{i}", tokens=100))
    running = admit_all(p)
    assert len(running) == 6
    huge = add(p, waiter("huge", tokens=5000, at=1))
    small = add(p, waiter("small", tokens=100, at=2))
    assert admit(p) == []
    p.release(running[0][1])
    assert admit(p) == [huge]
    assert p.in_flight == 6
    p.release(running[1][1])
    assert admit(p) == [small]


def test_a_batch_counts_as_its_sequences_against_the_cap() -> None:
    p = policy(blocks=100, max_sequences=4)
    first = add(p, waiter("a", sequences=2))
    second = add(p, waiter("b", sequences=16))
    third = add(p, waiter("c"))
    # 16 sequences are charged half the cap (2): 2 + 2 = 4 fills it.
    assert admit(p) == [first, second]
    assert p.engines["e0"].running_sequences == 4
    assert list(p.waiters()) == [third]


def test_a_burst_spreads_over_the_engines() -> None:
    p = policy(blocks=10, engines=2)
    for _ in range(6):
        add(p, waiter(tokens=300))
    placed = admit_all(p)
    assert len(placed) == 6
    assert sorted(r.engine for _, r in placed) == ["e0"] * 3 + ["e1"] * 3


def test_a_request_goes_only_to_engines_that_are_up_and_serve_its_model() -> None:
    p = policy(blocks=10, engines=3)
    view(p, "e0").routable = False
    view(p, "e1").models = frozenset({"other"})
    for _ in range(5):
        add(p, waiter())
    assert {r.engine for _, r in admit_all(p)} == {"e2"}


def test_a_full_model_does_not_hold_up_another_model() -> None:
    p = policy(blocks=10, engines=2)
    view(p, "e1").models = frozenset({"small"})
    add(p, waiter(tokens=500))
    add(p, waiter(tokens=500))
    assert len(admit(p)) == 2  # e0 is full: 5 + 5 blocks of 10
    blocked = add(p, waiter("a", tokens=100, at=1))
    other = add(p, Waiter("b", "normal", 100, arrival=2, deadline=32, model="small"))
    assert admit(p) == [other]
    assert list(p.waiters()) == [blocked]


def test_a_retry_avoids_the_engine_that_failed_it_and_goes_first() -> None:
    p = policy(blocks=10, engines=2)
    add(p, waiter("a", at=0))
    retry = waiter("b", at=5, excluded=frozenset({"e0"}))
    p.enqueue(retry, now=5.0, front=True)
    placed = dict((w.tenant, r.engine) for w, r in admit_all(p))
    assert placed["b"] == "e1"


def test_a_forgotten_engine_takes_its_releases_quietly() -> None:
    p = policy(blocks=10, engines=2)
    add(p, waiter())
    ((_, reservation),) = admit_all(p)
    p.forget_engine(reservation.engine)
    assert p.release(reservation)
    assert not p.release(reservation)


def test_prefix_routing_keeps_a_prefix_on_one_engine() -> None:
    p = policy(blocks=100, engines=3)
    p.router = prefix_router()
    for i in range(4):
        add(p, waiter(f"t{i}", affinity=1234))
    assert len({r.engine for _, r in admit_all(p)}) == 1


def test_a_prompt_goes_to_the_engine_that_reports_holding_it() -> None:
    """The waiter's prompt reaches routing: every key's requests go where its
    blocks are held, and to the key's engine where no engine's holdings are
    known (the choice says why)."""
    p = policy(blocks=100, engines=3)
    indexes = {f"e{i}": BlockIndex() for i in range(3)}
    p.router = prefix_router(ReportedCache(indexes))
    ids = tuple(range(8))
    assert indexes["e2"].stored([1, 2], None, list(ids), 4)
    for index in indexes.values():
        index.live = True
    # Keys whose own ranking prefers another engine; three, under the cap.
    fleet = [b.load(waiter(), 0.0) for b in p.engines.values()]
    keys = [k for k in range(50) if PrefixRoute().choose(k, fleet).engine != "e2"]  # type: ignore[union-attr]
    for key in keys[:3]:
        add(p, waiter(f"t{key}", affinity=key, prompt=PromptBlocks(ids)))
    admitted = admit_all(p)
    assert {r.engine for _, r in admitted} == {"e2"}
    assert all(r.choice is not None and r.choice.fallback is None for _, r in admitted)
    indexes["e0"].live = False
    add(p, waiter("t", affinity=1, prompt=PromptBlocks(ids)))
    ((_, reservation),) = admit_all(p)
    assert reservation.choice is not None
    assert reservation.choice.fallback == "events"


def test_waiters_past_their_deadline_are_expired_not_admitted() -> None:
    p = policy(blocks=10)
    add(p, waiter(tokens=1000))
    ((_, running),) = admit_all(p)
    late = add(p, waiter("a", tokens=100, at=0))
    on_time = add(p, waiter("b", tokens=100, at=20))
    p.release(running)
    admitted, expired = p.pop_admissible(now=35.0)
    assert expired == [late]
    assert [w for w, _ in admitted] == [on_time]


def test_a_full_queue_refuses_by_count_and_by_bytes() -> None:
    p = policy(blocks=1, max_queue_depth=2)
    add(p, waiter())
    add(p, waiter())
    with pytest.raises(QueueFull) as by_count:
        add(p, waiter())
    assert by_count.value.reason == "queue_full"
    q = policy(blocks=1, max_queue_bytes=1000)
    big = add(q, waiter("a", size=600))
    with pytest.raises(QueueFull) as by_bytes:
        add(q, waiter("b", size=600))
    assert by_bytes.value.reason == "queue_full"
    assert q.remove(big)
    add(q, waiter("b", size=600))


def test_a_queue_of_depth_zero_admits_what_fits_now_and_refuses_what_would_wait() -> None:
    p = policy(blocks=1, max_queue_depth=0)
    first = add(p, waiter())
    assert admit(p) == [first]
    with pytest.raises(QueueFull) as refused:
        add(p, waiter())
    assert refused.value.reason == "queue_full"


def opened_up(p: AdmissionPolicy) -> float:
    """The factor after a long spell of requests waiting with KV to spare."""
    add(p, waiter(tokens=1000))
    admit(p)
    add(p, waiter(tokens=1000))
    for _ in range(100):
        p.observe_engine("e0", EngineReading(0, None, 0.3, 1000, 1))
    return p.engines["e0"].factor


# With no preemption allowed (the budget at 0), the overcommit stops at what
# completed requests justify: the ceiling.


def test_growth_stops_at_what_completed_requests_justify() -> None:
    p = policy(blocks=10, preemption_budget=0)
    # Requests reserved 1000 tokens (100 prompt + 900 output) and wrote 400:
    # each peaked at 100 + 400 = 500, so overcommit up to 2x.
    for _ in range(10):
        add(p, waiter(tokens=1000))
        ((_, reservation),) = admit_all(p)
        p.release(reservation, used=(100, 400))
    assert opened_up(p) == pytest.approx(2.0)


def test_answers_that_use_all_their_max_tokens_justify_no_overcommit() -> None:
    """A burst of such answers reaches its peaks together: a budget above the
    engine's capacity would be preempted, however staggered they once were."""
    p = policy(blocks=10, preemption_budget=0)
    for _ in range(10):
        add(p, waiter(tokens=1000))
        ((_, reservation),) = admit_all(p)
        p.release(reservation, used=(100, 900))
    assert opened_up(p) == pytest.approx(1.0)


def test_before_any_request_completed_the_budget_stays_at_the_worst_case() -> None:
    """A fresh gateway's first burst: nothing justifies overcommitting yet."""
    assert opened_up(policy(blocks=10, preemption_budget=0)) == pytest.approx(1.0)
    assert opened_up(policy(blocks=10, initial_factor=1.5, preemption_budget=0)) == pytest.approx(
        1.5
    )


def test_the_factor_falls_to_the_ceiling_when_completions_justify_less() -> None:
    p = policy(blocks=10, preemption_budget=0)
    for _ in range(10):
        add(p, waiter(tokens=1000))
        ((_, reservation),) = admit_all(p)
        p.release(reservation, used=(100, 150))
    assert opened_up(p) == pytest.approx(4.0)
    for _ in range(200):
        add(p, waiter(tokens=1000))
        for _, reservation in admit_all(p):
            p.release(reservation, used=(100, 900))
    p.observe_engine("e0", EngineReading(0, None, 0.3, 1000, 1))
    assert p.engines["e0"].factor == pytest.approx(1.0, abs=0.05)


def backlog_draining_at_100_tokens_a_second(p: AdmissionPolicy) -> None:
    """One request of 100 tokens (one block) runs at a time for one second
    while others wait: the queue drains at 100 tokens/s."""
    for _ in range(3):
        add(p, waiter(tokens=100, at=0))
    running = admit_all(p, now=0.0)  # admitted without waiting: not a measure
    for second in range(1, 6):
        for _, reservation in running:
            p.release(reservation)
        running = admit_all(p, now=float(second))
        add(p, waiter(tokens=100, at=second))


def test_the_drain_rate_is_measured_while_requests_wait() -> None:
    p = policy(blocks=1)
    assert p.forecast.rate() is None
    backlog_draining_at_100_tokens_a_second(p)
    assert p.forecast.rate() == pytest.approx(100, rel=0.2)


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
    hints = [p.retry_after(now=6.0, tokens=100, tenant="a") for _ in range(5)]
    # Each later client comes back about one request's drain time later.
    gaps = [b - a for a, b in itertools.pairwise(hints)]
    assert all(gap == pytest.approx(1.0, rel=0.25) for gap in gaps)
    assert hints[0] == pytest.approx(3.0, rel=0.25)  # 200 queued + its own 100


def test_one_tenants_refusals_do_not_push_back_anothers() -> None:
    p = policy(blocks=1)
    backlog_draining_at_100_tokens_a_second(p)
    for _ in range(20):
        p.retry_after(now=6.0, tokens=100, tenant="noisy")
    assert p.retry_after(now=6.0, tokens=100, tenant="quiet") == pytest.approx(3.0, rel=0.25)


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
    assert refused.value.reason == "objective_forecast"
    assert refused.value.retry_after <= 4.0
    # A high-priority request only waits behind high-priority work.
    add(p, waiter(tokens=200, priority="high", at=6))


def steady_slow_backlog(p: AdmissionPolicy, seconds: int, queued: int) -> list[Reservation]:
    """For ``seconds``, 100-token requests arrive one a second and run one
    at a time (one block) for a second each, ``queued`` waiting: the queue
    drains at a well-measured 100 tokens/s. Returns what runs at the end."""
    for _ in range(queued + 1):
        add(p, waiter("busy", tokens=100, at=0))
    running = admit_all(p, now=0.0)
    for second in range(1, seconds + 1):
        for _, reservation in running:
            p.release(reservation)
        running = admit_all(p, now=float(second))
        add(p, waiter("busy", tokens=100, at=second))
    assert p.queued == queued
    assert p.forecast.rate() == pytest.approx(100, rel=0.05)
    return [reservation for _, reservation in running]


def test_a_wait_past_the_deadline_is_refused_early_and_told_at_most_the_deadline() -> None:
    """7 and 8 s to wait with a 4 s deadline, after a minute of steady
    backlog: refused at once, for the forecast, and never told to stay away
    longer than the deadline."""
    p = policy(blocks=1, max_wait=4.0)
    steady_slow_backlog(p, seconds=60, queued=2)
    for tenant, priority, tokens in (("busy", "normal", 500), ("other", "low", 600)):
        with pytest.raises(QueueFull) as refused:
            add(p, waiter(tenant, priority, tokens, at=60))
        assert refused.value.reason == "objective_forecast"
        assert 1.0 <= refused.value.retry_after <= 4.0


def test_a_wait_only_just_past_the_deadline_is_queued_not_refused() -> None:
    """A forecast has its error: refused early is only what is predicted to
    wait more than a fifth past the deadline. With a 4 s deadline and a
    well-measured 100 tokens/s, 4.4 s is queued (its deadline will tell),
    5.3 s refused."""
    p = policy(blocks=1, max_wait=4.0)
    steady_slow_backlog(p, seconds=60, queued=2)
    near = add(p, waiter("busy", tokens=240, at=60))  # (200 + 240) / 100: 4.4 s
    assert near in p.queue
    p = policy(blocks=1, max_wait=4.0)
    steady_slow_backlog(p, seconds=60, queued=2)
    with pytest.raises(QueueFull) as refused:
        add(p, waiter("busy", tokens=330, at=60))  # (200 + 330) / 100: 5.3 s
    assert refused.value.reason == "objective_forecast"


def test_a_client_refused_for_its_wait_is_told_to_come_back_while_it_can_queue() -> None:
    """5 s to wait with a 4 s deadline: told to come back when, queued, it
    should wait half its deadline (5 - 2 = 3 s), not when it should be
    admitted. Back then, the forecast queues it, and it is admitted within
    its deadline."""
    p = policy(blocks=1, max_wait=4.0)
    running = steady_slow_backlog(p, seconds=60, queued=2)
    with pytest.raises(QueueFull) as refused:
        add(p, waiter("late", "low", tokens=300, at=60))
    back = 60 + refused.value.retry_after
    assert back == pytest.approx(60 + 3.0, abs=0.3)
    late = waiter("late", "low", tokens=300, at=back)
    for second in range(61, 70):
        if second - 1 <= back < second:
            add(p, late)  # QueueFull fails the test
        for reservation in running:
            p.release(reservation)
        admitted = admit_all(p, now=float(second))
        running = [reservation for _, reservation in admitted]
        if any(w is late for w, _ in admitted):
            break
    assert back < second <= back + 4.0


def test_before_a_rate_is_measured_the_fleet_is_assumed_to_turn_over_in_two_seconds() -> None:
    # A cache of 10 blocks of 100 (9 for requests): 1,000 tokens, 500 a second assumed.
    p = policy(blocks=9, block_size=100)
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
        st.tuples(st.just("engine"), st.integers(0, 3), st.floats(0, 1), st.sampled_from("01")),
        st.tuples(st.just("eject"), st.sampled_from("01"), st.booleans()),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(actions)
def test_random_sequences_never_leak_or_double_release(steps: list[tuple[object, ...]]) -> None:
    p = policy(blocks=20, block_size=100, engines=2, max_sequences=5, max_queue_depth=10)
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
                model="m",
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
            kv = float(step[2])  # type: ignore[arg-type]
            p.observe_engine(f"e{step[3]}", EngineReading(preemptions, None, kv, 1000, 1))
        elif kind == "eject":
            view(p, f"e{step[1]}").routable = bool(step[2])

        for engine in p.engines.values():
            mine = [r for r in live if r.engine == engine.id]
            assert engine.in_flight == len(mine)
            assert engine.reserved_blocks == sum(r.blocks for r in mine)
            assert engine.running_sequences == sum(r.sequences for r in mine)
            assert engine.config.min_factor <= engine.factor <= engine.config.max_factor
            assert engine.running_sequences <= engine.max_sequences or engine.in_flight == 1
        assert p.queued == len(queued)
        assert p.queue.size == sum(w.size for w in queued)
        assert sorted(map(id, p.waiters())) == sorted(map(id, queued))
        assert math.isfinite(p.retry_after(clock))

    for reservation in live:
        assert p.release(reservation)
    for engine in p.engines.values():
        assert (engine.in_flight, engine.reserved_blocks, engine.running_sequences) == (0, 0, 0)


def test_a_light_tenant_is_not_refused_for_a_heavy_tenants_backlog() -> None:
    """The heavy tenant has queued up to the deadline: its next request is
    refused, but a light tenant's waits only for its fair turn and is queued."""
    p = policy(blocks=1, max_wait=4.0)
    backlog_draining_at_100_tokens_a_second(p)
    add(p, waiter("t", tokens=100, at=6))  # "t" now has ~3 s queued
    with pytest.raises(QueueFull):
        add(p, waiter("t", tokens=200, at=6))
    light = add(p, waiter("light", tokens=200, at=6))
    assert light in p.queue


def test_a_pinned_request_waits_for_its_engine_while_others_have_room() -> None:
    p = policy(blocks=1, engines=2)
    add(p, waiter(tokens=100, at=0, pinned="e0"))
    add(p, waiter(tokens=100, at=1, pinned="e0"))
    admitted = admit_all(p)
    assert [r.engine for _, r in admitted] == ["e0"]
    assert p.queued == 1


def held_on_e0(
    affinity_wait: float, steal: str = "room"
) -> tuple[AdmissionPolicy, PromptBlocks, Reservation]:
    """Two engines of 10 blocks, e0 reporting that it holds a prompt's
    blocks, and full: a request for that prompt fits only on e1 now."""
    p = policy(
        blocks=10,
        engines=2,
        affinity_wait=affinity_wait,
        affinity_steal=steal,
        max_request_share=1.0,
    )
    indexes = {f"e{i}": BlockIndex() for i in range(2)}
    p.router = prefix_router(ReportedCache(indexes))
    prompt = PromptBlocks(tuple(range(8)))
    assert indexes["e0"].stored([1, 2], None, list(prompt.ids), 4)
    for index in indexes.values():
        index.live = True
    add(p, waiter("filler", tokens=1000, prompt=prompt))
    ((_, filler),) = admit_all(p)
    assert filler.engine == "e0"
    return p, prompt, filler


def test_a_request_waits_for_the_engine_holding_its_prompt_and_lets_the_next_pass() -> None:
    p, prompt, filler = held_on_e0(affinity_wait=1.0)
    held = add(p, waiter("t", affinity=7, prompt=prompt, at=0.0))
    # The next one takes e1 whole: the room the waiter could have had.
    other = add(p, waiter("t", affinity=8, tokens=1000, at=0.1))
    admitted = admit_all(p, now=0.2)
    assert [(w, r.engine) for w, r in admitted] == [(other, "e1")]
    assert p.still_queued(held)
    # Its engine frees: it goes there, and its choice says it waited.
    p.release(filler)
    ((w, reservation),) = admit_all(p, now=0.5)
    assert w is held
    assert reservation.engine == "e0"
    assert reservation.choice is not None
    assert reservation.choice.waited_for == "e0"


def test_a_waiter_takes_room_elsewhere_that_no_one_behind_it_took() -> None:
    """Waiting for the engine that holds its prompt while room on another
    engine idles would leave that engine empty (measured: the wait lost in
    every mix of the prefix benchmark): nobody else wants e1's room, so the
    waiter takes it at once, however long it might still wait."""
    p, prompt, _ = held_on_e0(affinity_wait=30.0)
    held = add(p, waiter("t", affinity=7, prompt=prompt, at=0.0))
    ((w, reservation),) = admit_all(p, now=0.1)
    assert w is held
    assert reservation.engine == "e1"
    assert reservation.choice is not None
    assert reservation.choice.waited_for == "e0"


def held_on_e0_with_e1_busy(steal: str) -> tuple[AdmissionPolicy, Waiter]:
    """e0 holds the prompt and is full; e1 runs one small request and has
    room for the waiter beside it."""
    p, prompt, _ = held_on_e0(affinity_wait=30.0, steal=steal)
    busy = add(p, waiter("u", affinity=8, tokens=100, at=0.0, pinned="e1"))
    ((w, _),) = admit_all(p, now=0.0)
    assert w is busy
    return p, add(p, waiter("t", affinity=7, prompt=prompt, at=0.0))


def test_an_idle_only_waiter_takes_no_room_beside_others_requests() -> None:
    """``affinity_steal="idle"``: e1 runs a request, so the waiter keeps
    waiting for e0 (its prompt would evict e1's cached prompts), where
    ``room`` sends it to e1 at once."""
    p, held = held_on_e0_with_e1_busy("idle")
    assert admit_all(p, now=0.1) == []
    assert p.still_queued(held)
    p, held = held_on_e0_with_e1_busy("room")
    ((w, reservation),) = admit_all(p, now=0.1)
    assert (w, reservation.engine) == (held, "e1")


def test_an_idle_only_waiter_takes_an_idle_engine() -> None:
    p, prompt, _ = held_on_e0(affinity_wait=30.0, steal="idle")
    held = add(p, waiter("t", affinity=7, prompt=prompt, at=0.0))
    ((w, reservation),) = admit_all(p, now=0.1)
    assert (w, reservation.engine) == (held, "e1")


def test_the_wait_is_bounded_then_the_request_goes_before_those_behind_it() -> None:
    """While it may wait, the next request takes e1's room; once its wait
    is over, it is placed first, like any head of the order."""
    for now, first in ((0.9, "other"), (1.0, "held")):
        p, prompt, _ = held_on_e0(affinity_wait=1.0)
        held = add(p, waiter("t", affinity=7, prompt=prompt, at=0.0))
        other = add(p, waiter("u", affinity=8, tokens=1000, at=0.1))
        ((w, reservation),) = admit_all(p, now=now)
        assert w is {"held": held, "other": other}[first]
        assert reservation.engine == "e1"


def test_with_no_affinity_wait_a_request_goes_elsewhere_at_once() -> None:
    p, prompt, _ = held_on_e0(affinity_wait=0.0)
    add(p, waiter("t", affinity=7, prompt=prompt, at=0.0))
    ((_, reservation),) = admit_all(p, now=0.0)
    assert reservation.engine == "e1"
    assert reservation.choice is not None
    assert reservation.choice.waited_for is None
