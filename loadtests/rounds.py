"""A shape run in rounds against three targets — vLLM direct, vLLM direct
again, the gateway — reduced to one row per step.

One run per target says nothing of how far a second run of the same target
would land; direct run twice in each round does: *direct again* against
direct is the noise band, and the gateway is read against it. Per step and
target: tokens/s and TTFT p50/p99 as the median of the rounds with their
min–max; the ratios to direct paired within each round (a slow round slows
all three); and two marks:

- ``slower``: the gateway's median tokens/s below the lowest direct again
  had in any round;
- ``later``: the gateway's median TTFT p99 above direct's median plus the
  band, the widest gap between direct and direct again in one round.

Per class (where the users were of several): TTFT p50/p99 likewise, and the
requests refused and missed, summed over the rounds. Pure functions over the
runs' ``summary.json``; ``loadtests/rounds_page.py`` writes the page.
"""

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

TARGETS = ("direct", "again", "gateway")
NAMES = {"direct": "direct", "again": "direct again", "gateway": "gateway"}
# A round's runs: each target's summary.json.
Round = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Spread:
    """The median of the rounds and their min–max."""

    median: float
    low: float
    high: float

    def cell(self, digits: int = 3) -> str:
        if self.low == self.high:
            return f"{self.median:.{digits}f}"
        return f"{self.median:.{digits}f} ({self.low:.{digits}f}–{self.high:.{digits}f})"


def spread(values: Sequence[float | None]) -> Spread | None:
    """Over the values there are (None: a round with no figure)."""
    known = [v for v in values if v is not None]
    if not known:
        return None
    return Spread(statistics.median(known), min(known), max(known))


@dataclass
class ClassSpread:
    ttft_p50: Spread | None
    ttft_p99: Spread | None
    requests: int
    refused: int
    misses: int


@dataclass
class RoundStep:
    users: int
    tokens: dict[str, Spread | None]
    ttft_p50: dict[str, Spread | None]
    ttft_p99: dict[str, Spread | None]
    # gateway and again over direct, each round's pair, then their spread.
    tokens_ratio: dict[str, Spread | None]
    ttft_p99_ratio: dict[str, Spread | None]
    band_p99: float | None
    slower: bool
    later: bool
    classes: dict[str, dict[str, ClassSpread]] = field(default_factory=dict)

    @property
    def marks(self) -> str:
        return ", ".join(
            name for name, on in (("slower", self.slower), ("later", self.later)) if on
        )


def _steps(run: dict[str, Any]) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = run["steps"]
    return steps


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _paired(
    rounds: Sequence[Round], index: int, target: str, value: Callable[[dict[str, Any]], Any]
) -> list[float | None]:
    """``target``'s figure over direct's, per round."""
    return [
        _ratio(value(_steps(r[target])[index]), value(_steps(r["direct"])[index])) for r in rounds
    ]


def _band(rounds: Sequence[Round], index: int) -> float | None:
    gaps = []
    for r in rounds:
        direct = _steps(r["direct"])[index]["ttft_p99"]
        again = _steps(r["again"])[index]["ttft_p99"]
        if direct is not None and again is not None:
            gaps.append(abs(again - direct))
    return max(gaps) if gaps else None


def _class_spread(rounds: Sequence[Round], index: int, target: str, name: str) -> ClassSpread:
    rows = []
    for r in rounds:
        per_step = r[target].get("classes") or []
        row = per_step[index].get(name) if index < len(per_step) else None
        if row is not None:
            rows.append(row)
    return ClassSpread(
        ttft_p50=spread([row["ttft_p50"] for row in rows]),
        ttft_p99=spread([row["ttft_p99"] for row in rows]),
        requests=sum(row["requests"] for row in rows),
        refused=sum(row["refused"] for row in rows),
        misses=sum(row["misses"] for row in rows),
    )


def class_names(rounds: Sequence[Round]) -> list[str]:
    return sorted(
        {
            name
            for r in rounds
            for run in r.values()
            for step in run.get("classes") or []
            for name in step
        }
    )


def aggregate(rounds: Sequence[Round]) -> list[RoundStep]:
    """One row per step; every run must have the same steps."""
    if not rounds:
        return []
    users = [step["users"] for step in _steps(rounds[0]["direct"])]
    for r in rounds:
        for target in TARGETS:
            found = [step["users"] for step in _steps(r[target])]
            if found != users:
                raise ValueError(f"{target}'s steps {found} are not direct's {users}")
    names = class_names(rounds)
    rows = []
    for i, count in enumerate(users):

        def over(attribute: str, index: int = i) -> dict[str, Spread | None]:
            return {t: spread([_steps(r[t])[index][attribute] for r in rounds]) for t in TARGETS}

        tokens, p50, p99 = over("tokens_per_s"), over("ttft_p50"), over("ttft_p99")
        band = _band(rounds, i)
        gateway_tokens, again_tokens = tokens["gateway"], tokens["again"]
        gateway_p99, direct_p99 = p99["gateway"], p99["direct"]
        rows.append(
            RoundStep(
                users=count,
                tokens=tokens,
                ttft_p50=p50,
                ttft_p99=p99,
                tokens_ratio={
                    t: spread(_paired(rounds, i, t, lambda s: s["tokens_per_s"]))
                    for t in ("again", "gateway")
                },
                ttft_p99_ratio={
                    t: spread(_paired(rounds, i, t, lambda s: s["ttft_p99"]))
                    for t in ("again", "gateway")
                },
                band_p99=band,
                slower=bool(
                    gateway_tokens and again_tokens and gateway_tokens.median < again_tokens.low
                ),
                later=bool(
                    gateway_p99
                    and direct_p99
                    and band is not None
                    and gateway_p99.median > direct_p99.median + band
                ),
                classes={
                    name: {t: _class_spread(rounds, i, t, name) for t in TARGETS} for name in names
                },
            )
        )
    return rows


def rotated(index: int) -> tuple[str, ...]:
    """Round ``index``'s order: the three targets rotated by one a round, so
    that each runs first, second and last as often (a machine that warms or
    cools over a round weighs on each alike)."""
    shift = index % len(TARGETS)
    return TARGETS[shift:] + TARGETS[:shift]
