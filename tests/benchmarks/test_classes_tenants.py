"""The tenants part's flood (``benchmarks.classes.tenants``): open-loop
arrivals split between a heavy tenant and a light one by the ratio asked."""

from collections import Counter
from itertools import pairwise

from benchmarks.classes.load import poisson_arrivals
from benchmarks.classes.main import parser
from benchmarks.classes.tenants import kinds, shares


def test_tenant_a_sends_the_given_multiple_of_b() -> None:
    args = parser().parse_args(["--tenant-a-times", "10"])
    split = dict(shares(args))
    assert abs(split["A"] + split["B"] - 1.0) < 1e-12
    assert abs(split["A"] / split["B"] - 10.0) < 1e-9


def test_the_flood_is_open_loop_and_keeps_the_ratio() -> None:
    args = parser().parse_args([])
    # 60,000 arrivals: B's count is ~5,450 with a standard deviation of ~70,
    # so a 10% band cannot be decided by a few draws.
    arrivals = poisson_arrivals(100.0, 600.0, shares(args), seed=7)
    counts = Counter(a.label for a in arrivals)
    assert 0.9 * 10 < counts["A"] / counts["B"] < 1.1 * 10
    # Open loop: the offsets are fixed before any request is sent.
    assert all(b.at >= a.at for a, b in pairwise(arrivals))


def test_both_tenants_name_themselves_and_share_one_class_and_objective() -> None:
    a, b = kinds(parser().parse_args(["--tenant-objective", "10"]))
    assert (a.tenant, b.tenant) == ("tenant-a", "tenant-b")
    assert a.priority == b.priority == "normal"
    assert a.objective == b.objective == 10.0
