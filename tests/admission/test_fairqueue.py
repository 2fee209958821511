"""The order of the waiting requests: priority, then fair share of tokens
between tenants, then arrival."""

from app.admission.fairqueue import FairQueue, Waiter


def waiter(tenant: str = "t", priority: str = "normal", tokens: int = 100, at: float = 0.0,
           model: str = "m") -> Waiter:  # fmt: skip
    return Waiter(tenant, priority, tokens, arrival=at, model=model)


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
