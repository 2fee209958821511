"""A benchmark client's call as the overload tests build them."""

from benchmarks.harness import Call


def call(user: int, started: float, status: int) -> Call:
    """A call of ``user`` sent at ``started`` that ended with ``status``."""
    c = Call(status=status, started=started)
    c.user = user
    return c
