"""A full queue drops from the longest queue (``app.admission.overflow``,
through ``AdmissionPolicy.enqueue``): a flood cannot keep a light tenant or
a higher class out, and nobody is pushed out for an arrival that is refused
anyway."""

import pytest

from app.admission.policy import QueueFull
from tests.admission.test_policy import add, policy, waiter


def test_a_light_tenant_takes_the_place_of_the_floods_newest_request() -> None:
    p = policy(blocks=1, max_queue_depth=4)
    flood = [add(p, waiter("heavy", at=float(i))) for i in range(4)]
    light = waiter("light", at=10.0)
    pushed = p.enqueue(light, now=10.0)
    assert [out.waiter for out in pushed] == [flood[-1]]
    assert pushed[0].retry_after >= 1
    assert light in p.queue
    assert flood[-1] not in p.queue
    assert len(p.queue) == 4


def test_the_heaviest_tenant_is_refused_itself() -> None:
    p = policy(blocks=1, max_queue_depth=4)
    for i in range(3):
        add(p, waiter("heavy", at=float(i)))
    add(p, waiter("light", at=3.0))
    with pytest.raises(QueueFull) as refused:
        add(p, waiter("heavy", at=4.0))
    assert refused.value.reason == "queue_full"
    assert len(p.queue) == 4


def test_tenants_a_place_apart_do_not_swap() -> None:
    # Two against one: after a swap the light one would queue as much as
    # the other, so the arrival is refused instead of trading places.
    p = policy(blocks=1, max_queue_depth=3)
    add(p, waiter("a", at=0.0))
    add(p, waiter("a", at=1.0))
    add(p, waiter("b", at=2.0))
    with pytest.raises(QueueFull):
        add(p, waiter("b", at=3.0))


def test_a_higher_class_pushes_out_a_lower_one_and_never_the_reverse() -> None:
    p = policy(blocks=1, max_queue_depth=2)
    low = add(p, waiter("t", "low", at=0.0))
    high = add(p, waiter("t", "high", at=1.0))
    pushed = p.enqueue(waiter("t", "high", at=2.0, deadline=32.0, objective=30.0), now=2.0)
    assert [out.waiter for out in pushed] == [low]
    with pytest.raises(QueueFull):
        add(p, waiter("u", "low", at=3.0))
    assert high in p.queue


def test_enough_bytes_are_freed_or_none() -> None:
    p = policy(blocks=1, max_queue_bytes=3000)
    small = [add(p, waiter("heavy", at=float(i), size=600)) for i in range(5)]
    pushed = p.enqueue(waiter("light", at=9.0, size=1100, deadline=39.0, objective=30.0), now=9.0)
    # 3,000 + 1,100 over 3,000: two of the flood's newest make the room.
    assert [out.waiter for out in pushed] == [small[4], small[3]]
    too_big = waiter("other", at=10.0, size=3000, deadline=40.0, objective=30.0)
    with pytest.raises(QueueFull):
        p.enqueue(too_big, now=10.0)
    assert small[2] in p.queue  # nobody pushed out for a refused arrival
