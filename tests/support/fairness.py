"""Reading the fair order off the access log of a live run."""

from collections.abc import Iterable, Mapping


def heavy_admitted_before_light_finished(
    entries: Iterable[Mapping[str, object]], light: str
) -> tuple[int, int]:
    """How many requests of other tenants were admitted before ``light``'s
    last admission, and how many of those requests there were in all.

    A live run has a few of the light tenant's requests, so the share of
    tokens while both wait moves by ten points with one admission (the
    order's precision is measured in-process over hundreds of admissions,
    tests/admission/test_fairqueue.py). What a live run can tell with
    a bound it holds is the wiring: served in arrival order, the light
    tenant's requests (sent last) would wait for the heavy tenant's whole
    backlog; served fairly, they are through within a few of its requests.
    """
    admitted = sorted(
        (float(str(e["arrival_ts"])) + float(str(e["queue_s"])), str(e["tenant"])) for e in entries
    )
    last_light = max(at for at, tenant in admitted if tenant == light)
    others = [at for at, tenant in admitted if tenant != light]
    return sum(1 for at in others if at < last_light), len(others)
