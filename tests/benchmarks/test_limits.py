"""The limits benchmark's counterfactuals (benchmarks/limits.py ``replay``):
each rule replayed on requests whose lengths vary the way the tiny model's
answers do, and held to what the rule promises. Pure functions."""

import random

from benchmarks.limits import Request, replay, sliding

LIMIT = 10_000
WINDOW = 10.0
SECONDS = 40.0


def requests(seed: int = 7, n: int = 400) -> list[Request]:
    """Prompts of 50–90 tokens, up to 512 tokens of output; most answers
    short, one in six running to the end."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        prompt = rng.randint(50, 90)
        written = 512 if rng.random() < 1 / 6 else rng.randint(5, 120)
        out.append(Request(i * 0.05, 0.2 + written / 200, prompt + written, prompt + 512, prompt))
    return out


def windows(rule: str) -> tuple[float, float]:
    """The replayed windows' mean and max, in tokens."""
    let_through = replay(requests(), 8, LIMIT, WINDOW, SECONDS, rule)
    w = sliding(let_through, WINDOW, 0.0, SECONDS)
    return w.mean, w.max


def test_reserving_the_worst_case_never_passes_the_limit() -> None:
    _, top = windows("worst")
    assert top <= LIMIT


def test_the_gateways_rule_stays_within_one_worst_case_and_lets_more_through() -> None:
    mean, top = windows("gateway")
    assert top <= LIMIT + max(r.worst for r in requests())
    assert mean > windows("worst")[0]


def test_admitting_while_under_the_limit_stays_within_one_worst_case() -> None:
    _, top = windows("under")
    assert top <= LIMIT + max(r.worst for r in requests())


def test_charging_the_estimate_alone_carries_its_excess_over_the_bound() -> None:
    # Requests in flight when a window ends are the long ones more often than
    # not (they are in flight longer): the estimate alone overshoots.
    mean, top = windows("estimate")
    assert top > LIMIT + max(r.worst for r in requests())
    assert mean > windows("under")[0]
