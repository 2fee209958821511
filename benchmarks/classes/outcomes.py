"""What became of each request, judged by its objective, and what a kind
of request came to in one run.

The definitions the benchmark uses:

- a request is **met** when it completed and its first content byte came
  within its objective of its send (TTFT ≤ T);
- a kind's **attainment** is met ÷ sent: refused, evicted, failed and cut
  requests are misses;
- **goodput** is the completion tokens of met requests that ended inside
  the window (the load's schedule plus a drain of the longest objective),
  per second of the window;
- in TTFT percentiles, a request that got no first token (refused, failed,
  or cut before one) counts as +inf: a refusal never improves a percentile.
"""

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from benchmarks.harness import Call, q, tokens_within

# The status of a request still running when its window closed: the client
# left it there (the relay and the engine stop it), and it is a miss.
CUT = -3
INF = math.inf

Outcome = Literal["met", "late", "refused", "evicted", "failed", "cut"]
OUTCOMES: tuple[Outcome, ...] = ("met", "late", "refused", "evicted", "failed", "cut")


def outcome(call: Call, objective: float) -> Outcome:
    """One request's outcome: ``late`` completed past its objective,
    ``evicted`` stopped for a higher class (a 429 or a stream's final error
    event saying so), ``refused`` any other 429, ``failed`` anything else
    that did not complete."""
    if call.status == CUT:
        return "cut"
    if call.error_code == "evicted":
        return "evicted"
    if call.status == 429:
        return "refused"
    if call.status != 200:
        return "failed"
    ttft = call.ttft
    return "met" if ttft is not None and ttft <= objective else "late"


def ttft_or_inf(call: Call) -> float:
    """A request's TTFT, +inf when it got no first token."""
    ttft = call.ttft
    return INF if ttft is None else ttft


@dataclass
class KindFigures:
    """One kind of request in one run."""

    sent: int
    met: int
    late: int
    refused: int
    evicted: int
    failed: int
    cut: int
    attainment: float | None
    # Of the requests the target did not refuse, the share that met.
    admitted_attainment: float | None
    ttft_p50: float | None
    ttft_p99: float | None
    # Tokens that arrived while the load ran (completed requests' usage,
    # spread over their streaming), per second of the schedule.
    tokens_per_s: float
    # Completion tokens of completed requests that ended inside the window.
    output_tokens: int
    goodput_tokens: int
    goodput_per_s: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def kind_figures(
    calls: list[Call], objective: float, t0: float, load_s: float, window_s: float
) -> KindFigures:
    """``calls`` (one kind's, sent from ``t0`` on) over a load of ``load_s``
    seconds and a window of ``window_s``."""
    counts = dict.fromkeys(OUTCOMES, 0)
    outcomes = [outcome(c, objective) for c in calls]
    for o in outcomes:
        counts[o] += 1
    end = t0 + window_s
    inside = [c for c in calls if c.status == 200 and c.finished <= end]
    met = [c for c, o in zip(calls, outcomes, strict=True) if o == "met" and c.finished <= end]
    ttfts = [ttft_or_inf(c) for c in calls]
    admitted = len(calls) - counts["refused"]
    goodput = sum(c.completion_tokens for c in met)

    def share(part: int, whole: int) -> float | None:
        return part / whole if whole else None

    return KindFigures(
        sent=len(calls),
        met=counts["met"],
        late=counts["late"],
        refused=counts["refused"],
        evicted=counts["evicted"],
        failed=counts["failed"],
        cut=counts["cut"],
        attainment=share(counts["met"], len(calls)),
        admitted_attainment=share(counts["met"], admitted),
        ttft_p50=q(ttfts, 0.5),
        ttft_p99=q(ttfts, 0.99),
        tokens_per_s=tokens_within(calls, t0, t0 + load_s) / load_s if load_s > 0 else 0.0,
        output_tokens=sum(c.completion_tokens for c in inside),
        goodput_tokens=goodput,
        goodput_per_s=goodput / window_s if window_s > 0 else 0.0,
    )


def by_kind(calls: Iterable[Call]) -> dict[str, list[Call]]:
    """Calls grouped by their label (the kind they were sent as)."""
    grouped: dict[str, list[Call]] = {}
    for c in calls:
        grouped.setdefault(c.label, []).append(c)
    return grouped


def run_figures(
    calls: list[Call], objectives: Mapping[str, float], t0: float, load_s: float, window_s: float
) -> dict[str, KindFigures]:
    """Every kind's figures, and ``total`` (each request judged by its own
    kind's objective)."""
    grouped = by_kind(calls)
    figures = {
        label: kind_figures(grouped.get(label, []), objective, t0, load_s, window_s)
        for label, objective in objectives.items()
    }
    figures["total"] = combined(list(figures.values()), window_s)
    return figures


def combined(parts: list[KindFigures], window_s: float) -> KindFigures:
    """Kinds added up; percentiles are left out (they do not add up: each
    kind's are in its own row)."""
    sent = sum(p.sent for p in parts)
    met = sum(p.met for p in parts)
    refused = sum(p.refused for p in parts)
    goodput = sum(p.goodput_tokens for p in parts)
    return KindFigures(
        sent=sent,
        met=met,
        late=sum(p.late for p in parts),
        refused=refused,
        evicted=sum(p.evicted for p in parts),
        failed=sum(p.failed for p in parts),
        cut=sum(p.cut for p in parts),
        attainment=met / sent if sent else None,
        admitted_attainment=met / (sent - refused) if sent - refused else None,
        ttft_p50=None,
        ttft_p99=None,
        tokens_per_s=sum(p.tokens_per_s for p in parts),
        output_tokens=sum(p.output_tokens for p in parts),
        goodput_tokens=goodput,
        goodput_per_s=goodput / window_s if window_s > 0 else 0.0,
    )
