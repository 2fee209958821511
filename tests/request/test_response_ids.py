"""Which engine holds which response (``app.request.response_ids``): the memory is
bounded and expires. Finding a response the memory does not hold, and the
routes that use it, are tests/request/test_routes_glue.py's."""

from app.request.response_ids import Holder, ResponseHolders


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_response_is_remembered_until_it_expires() -> None:
    clock = Clock()
    holders = ResponseHolders(capacity=10, ttl=60, clock=clock)
    holders.remember("resp_1", Holder("http://e0", "acme", 30))
    clock.now = 59.9
    assert holders.recall("resp_1") == Holder("http://e0", "acme", 30)
    clock.now = 60.0
    assert holders.recall("resp_1") is None
    assert len(holders) == 0


def test_the_least_recently_made_is_forgotten_first_beyond_the_bound() -> None:
    holders = ResponseHolders(capacity=2, ttl=60, clock=Clock())
    for i in range(3):
        holders.remember(f"resp_{i}", Holder("http://e0", "acme", i))
    assert holders.recall("resp_0") is None
    assert holders.recall("resp_1") is not None
    assert holders.recall("resp_2") is not None
    assert len(holders) == 2
