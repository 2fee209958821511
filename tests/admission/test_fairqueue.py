"""The order of the waiting requests: priority, then fair share of tokens
between tenants, then the earliest deadline (arrival, with equal
objectives). On the queue alone, then measured over hundreds of admissions.

The measurement: one gateway, and two replicas sharing a real Redis,
in-process in front of one scripted engine that runs a few requests at a
time. The test serves the engine's calls, so the order in which the gateways
admit is the only thing measured — no engine speed, no machine load decides
it. Tenant A sends ten times B's requests (440 in all); while both wait,
start-time fair queuing gives each tenant half of the admitted tokens (their
requests are the same size). B's forty admissions make a window of about
eighty: one admission more or less moves the share by about a point, against
a bound of five.
"""

import asyncio
import random
from typing import Any

import pytest

from app.admission.fairqueue import FairQueue, Waiter
from tests.support.asgi import Exchange, InProcessGateway, in_process_gateway
from tests.support.redis_server import RedisServer
from tests.support.scripted_engine import DONE, MODEL, EngineCall, ScriptedEngine, chunk
from tests.support.wait import wait_for


def waiter(tenant: str = "t", priority: str = "normal", tokens: int = 100, at: float = 0.0,
           model: str = "m", objective: float = 30.0) -> Waiter:  # fmt: skip
    return Waiter(tenant, priority, tokens, arrival=at, deadline=at + objective, model=model)


def serve(queue: FairQueue, count: int) -> list[Waiter]:
    served = []
    for _ in range(count):
        head = queue.head()
        assert head is not None
        queue.admit(head)
        served.append(head)
    return served


def test_priority_classes_go_first() -> None:
    queue = FairQueue()
    low, normal, high = waiter("a", "low", at=1), waiter("b", at=2), waiter("c", "high", at=3)
    for w in (low, normal, high):
        queue.add(w)
    assert serve(queue, 3) == [high, normal, low]


def test_tenants_share_admitted_tokens_fairly() -> None:
    """Tenant A queues ten times what B queues; while both wait, they
    alternate by tokens admitted, not by requests."""
    queue = FairQueue()
    for i in range(100):
        queue.add(waiter("A", at=i))
    for i in range(10):
        queue.add(waiter("B", at=100 + i))
    served = {"A": 0, "B": 0}
    while any(w.tenant == "B" for w in queue):
        (w,) = serve(queue, 1)
        served[w.tenant] += w.tokens
    assert served["B"] / (served["A"] + served["B"]) >= 0.45


def test_fair_share_is_measured_in_tokens() -> None:
    queue = FairQueue()
    for i in range(20):
        queue.add(waiter("long", tokens=1000, at=i))
        queue.add(waiter("short", tokens=100, at=i))
    served = {"long": 0, "short": 0}
    for w in serve(queue, 22):
        served[w.tenant] += w.tokens
    # Twenty short requests weigh about as much as two long ones.
    assert served["short"] >= 1500
    assert served["long"] <= 3000


def test_an_idle_tenant_does_not_bank_credit() -> None:
    queue = FairQueue()
    for i in range(30):
        queue.add(waiter("busy", at=i))
        serve(queue, 1)
    for i in range(5):
        queue.add(waiter("busy", at=100 + i))
    for i in range(5):
        queue.add(waiter("late", at=200 + i))
    first_six = [w.tenant for w in serve(queue, 6)]
    # "late" was idle while "busy" was served, yet it does not get the next
    # five turns in a row: the two alternate.
    assert first_six.count("busy") >= 2


def test_a_blocked_model_is_passed_over_and_nothing_else_is() -> None:
    queue = FairQueue()
    blocked = waiter("a", model="big", at=0)
    other = waiter("b", model="small", at=1)
    behind = waiter("a", model="small", at=2)
    for w in (blocked, other, behind):
        queue.add(w)
    assert queue.head() is blocked
    # Tenant a's first waiter is blocked, so all of a waits (FIFO per tenant).
    assert queue.head(skip={"big"}) is other
    queue.admit(other)
    assert queue.head(skip={"big"}) is None


def test_counts_tokens_and_bytes() -> None:
    queue = FairQueue()
    first = Waiter("a", "high", 100, arrival=0, size=10)
    second = Waiter("b", "low", 300, arrival=0, size=20)
    queue.add(first)
    queue.add(second)
    assert (len(queue), queue.tokens, queue.size) == (2, 400, 30)
    assert queue.tokens_up_to("high") == 100
    assert queue.depth_by_priority() == {"high": 1, "normal": 0, "low": 1}
    assert queue.remove(second)
    assert not queue.remove(second)
    assert queue.drain() == [first]
    assert (len(queue), queue.tokens, queue.size) == (0, 0, 0)


def test_within_a_tenant_the_earliest_deadline_goes_first() -> None:
    """A request that asks for a tighter objective goes ahead of its
    tenant's earlier ones due later, not ahead of another tenant's share."""
    queue = FairQueue()
    relaxed = [waiter("A", at=i, objective=30) for i in range(3)]
    for w in relaxed:
        queue.add(w)
    urgent = waiter("A", at=3, objective=1)
    queue.add(urgent)
    other = waiter("B", at=4, objective=30)
    queue.add(other)
    assert serve(queue, 5) == [urgent, other, *relaxed]
    assert queue.tokens_ahead("normal", "A", deadline=2.0) == 0


def test_with_equal_objectives_the_order_is_class_fair_share_then_arrival() -> None:
    """Every request promised the same: within a tenant, first come first
    served, as before objectives were per request."""
    queue = FairQueue()
    arrivals = [waiter(t, p, at=i) for i, (t, p) in enumerate(
        [("A", "normal"), ("A", "normal"), ("B", "normal"), ("A", "high"), ("B", "low"),
         ("A", "normal"), ("B", "normal")])]  # fmt: skip
    for w in arrivals:
        queue.add(w)
    order = [(w.tenant, w.priority, w.arrival) for w in serve(queue, len(arrivals))]
    assert order == [
        ("A", "high", 3),
        ("A", "normal", 0),
        ("B", "normal", 2),
        ("A", "normal", 1),
        ("B", "normal", 6),
        ("A", "normal", 5),
        ("B", "low", 4),
    ]


def test_a_retry_goes_to_the_front_of_its_tenants_queue() -> None:
    queue = FairQueue()
    first = waiter(at=1)
    queue.add(first)
    retry = waiter(at=0)
    queue.add(retry, front=True)
    assert queue.head() is retry


def test_what_goes_ahead_of_a_new_request_is_the_fair_orders_not_the_queues() -> None:
    """A heavy tenant has ten requests queued: a light tenant's new request
    goes ahead of all but what the heavy one is owed before it (its first);
    the heavy tenant's own next request waits behind everything."""
    queue = FairQueue()
    for i in range(10):
        queue.add(waiter("heavy", at=i))
    queue.add(waiter("top", "high", tokens=50))
    assert queue.tokens_ahead("normal", "light") == 50 + 100
    assert queue.tokens_ahead("normal", "heavy") == 50 + 1000
    assert queue.tokens_ahead("normal", None) == queue.tokens_up_to("normal") == 1050
    # Served in that order: the light request is admitted second of its class.
    light = waiter("light", at=20)
    queue.add(light)
    serve(queue, 1)  # the high one
    assert light in serve(queue, 2)


# --- measured over hundreds of admissions -----------------------------------------

SLOTS = 4


def _body(tenant: str, i: int) -> dict[str, object]:
    # Same length for every request: equal tokens, so the share of admitted
    # tokens is the share of admissions.
    return {"model": MODEL, "prompt": f"{tenant} asks {i:04d}", "max_tokens": 32, "stream": True}


def _finish(call: EngineCall) -> None:
    call.stream()
    call.send(chunk("a", finish="length") + DONE)
    call.end()


async def _admission_order(
    replicas: tuple[InProcessGateway, InProcessGateway],
    engine: ScriptedEngine,
    sends: list[tuple[int, str, int]],
) -> list[str]:
    """Send every (replica, tenant, i) at once, then serve the engine's calls,
    ``SLOTS`` at a time, each time ending one of those running, picked by a
    seeded draw (requests do not end in the order they started, so slots
    free up on either replica); the tenants in admission order."""
    draw = random.Random(7)
    exchanges: list[Exchange] = []
    for replica, tenant, i in sends:
        exchanges.append(
            replicas[replica].request(
                "/v1/completions", _body(tenant, i), headers={"X-Tenant-Id": tenant}
            )
        )

    # Everything is queued (or admitted) before the first call is answered,
    # so the order below is the fleet's choice among all the waiters.
    def placed() -> float:
        return sum(r.metric("gateway_queue_depth") for r in replicas) + engine.calls.qsize()

    async def all_placed() -> bool:
        return placed() >= len(sends)

    assert await wait_for(all_placed, timeout=60), placed()
    order: list[str] = []
    running: list[EngineCall] = []
    while len(order) < len(sends):
        call = await asyncio.wait_for(engine.calls.get(), timeout=60)
        order.append(str(call.body["prompt"]).split()[0])
        running.append(call)
        if len(running) == SLOTS or len(order) == len(sends):
            _finish(running.pop(draw.randrange(len(running))))
    for call in running:
        _finish(call)
    for exchange in exchanges:
        await exchange.done()
        assert exchange.status == 200
    return order


def _share_while_both_wait(order: list[str]) -> tuple[float, int]:
    """B's share of the admissions up to B's last one (B waits until then,
    and A always has more queued)."""
    last_b = max(i for i, tenant in enumerate(order) if tenant == "B")
    window = order[: last_b + 1]
    return window.count("B") / len(window), len(window)


async def _settled(*gateways: InProcessGateway) -> None:
    """Every hold given back (the gauges are written by each replica's
    dispatcher as it next runs)."""

    async def all_settled() -> bool:
        return all(g.settled() for g in gateways)

    assert await wait_for(all_settled, timeout=30)


@pytest.mark.parametrize(
    "layout",
    [
        pytest.param("both-over-both", id="both tenants split over both replicas"),
        pytest.param("light-on-one", id="the light tenant on one replica only"),
    ],
)
async def test_a_tenant_with_ten_times_the_load_gets_half_while_both_wait(
    redis: RedisServer, layout: str
) -> None:
    engine = ScriptedEngine(kv_blocks=4096, block_size=16)
    settings: dict[str, Any] = {
        "redis_url": redis.url,
        "max_concurrency": SLOTS,
        "objective_expired": 600,
        # A busy machine must not make a Redis call late enough to count
        # Redis as down (each replica would then admit on its own share).
        "redis_timeout": 10,
    }
    async with (
        in_process_gateway(engine, **settings) as first,
        in_process_gateway(engine, **settings) as second,
    ):
        heavy = [(i % 2, "A", i) for i in range(400)]
        light = [(i % 2 if layout == "both-over-both" else 1, "B", i) for i in range(40)]
        order = await _admission_order((first, second), engine, heavy + light)
        share, window = _share_while_both_wait(order)
        print(f"\n{layout}: B's share while both waited {share:.1%} of {window} admissions")
        assert 0.45 <= share <= 0.55
        await _settled(first, second)


async def test_one_gateway_gives_a_tenant_with_a_tenth_of_the_load_half() -> None:
    engine = ScriptedEngine(kv_blocks=4096, block_size=16)
    async with in_process_gateway(engine, max_concurrency=SLOTS, queue_timeout=600) as gateway:
        sends = [(0, "A", i) for i in range(400)] + [(0, "B", i) for i in range(40)]
        order = await _admission_order((gateway, gateway), engine, sends)
        share, window = _share_while_both_wait(order)
        print(f"\none gateway: B's share while both waited {share:.1%} of {window} admissions")
        assert 0.45 <= share <= 0.55
        await _settled(gateway)


def test_a_queued_requests_place_is_what_the_fair_order_admits_before_it() -> None:
    """A heavy tenant queued four requests first; a light tenant's request
    that arrived later starts, in tokens served, before most of them: its
    place counts only the heavy tenant's requests that start before it, and
    every class above."""
    queue = FairQueue()
    heavy = [waiter("heavy", at=i) for i in range(4)]
    for w in heavy:
        queue.add(w)
    light = waiter("light", at=10)
    queue.add(light)
    urgent = waiter("boss", "high", tokens=50, at=11)
    queue.add(urgent)
    low = waiter("light", "low", at=12)
    queue.add(low)
    # The order serves: urgent, heavy[0], light, heavy[1..3], low.
    order = serve_all(queue_copy := _copy(queue))
    assert order[:3] == [urgent, heavy[0], light]
    assert queue.ahead_of(light) == (2, 150)
    assert queue.ahead_of(urgent) == (0, 0)
    assert queue.ahead_of(heavy[2]) == (4, 350)
    assert queue.ahead_of(low) == (6, 550)
    # What ahead_of says matches the order the queue really serves.
    for w in [*heavy, light, urgent, low]:
        assert queue.ahead_of(w)[0] == order.index(w)
    assert len(queue_copy) == 0


def serve_all(queue: FairQueue) -> list[Waiter]:
    return serve(queue, len(queue))


def _copy(queue: FairQueue) -> FairQueue:
    """A queue holding the same waiters, added in the same order."""
    copy = FairQueue()
    for w in sorted(queue, key=lambda w: w.arrival):
        copy.add(w)
    return copy
