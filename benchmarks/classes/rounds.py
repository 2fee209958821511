"""Rounds: every target of a part once per round, in an order rotated from
round to round (none always first or last), and what a figure comes to
across the rounds — its median and range, and its ratio to (or difference
from) the anchor's figure in the same round, the pairing that cancels what
a round shares (the machine's state, the engine's warmth).

Pure: a run is the dict a part records (``target``, ``round`` and its
figures)."""

import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from benchmarks.overhead.rows import rotated
from benchmarks.overhead.spread import spread

Run = dict[str, Any]
Figure = Callable[[Run], float | None]


async def in_rounds(
    rounds: int,
    targets: Sequence[str],
    one: Callable[[str, int], Awaitable[Run]],
    shift: int = 0,
) -> list[Run]:
    """``one(target, round)`` for every target in every round, rotated;
    ``shift`` moves a part's first order (so that parts do not all start
    with the same target)."""
    runs = []
    for r in range(rounds):
        for name in rotated(list(targets), r + shift):
            runs.append({"target": name, "round": r, **await one(name, r)})
    return runs


def kind(label: str, key: str) -> Figure:
    """A figure of one kind of request (``total``: all of them)."""

    def get(run: Run) -> float | None:
        value = (run.get("kinds") or {}).get(label, {}).get(key)
        return None if value is None else float(value)

    return get


def values(runs: list[Run], target: str, figure: Figure) -> list[float]:
    return [v for r in runs if r["target"] == target and (v := figure(r)) is not None]


def across(runs: list[Run], target: str, figure: Figure) -> dict[str, float] | None:
    """The figure's median and range over the target's rounds."""
    return spread(values(runs, target, figure))


def paired(
    runs: list[Run], target: str, anchor: str, figure: Figure, ratio: bool = True
) -> dict[str, float] | None:
    """Over the rounds, the target's figure over the anchor's in the same
    round (``ratio``), or minus it; rounds where either is missing, or the
    anchor's ratio base is 0, are left out."""
    base = {r["round"]: figure(r) for r in runs if r["target"] == anchor}
    out = []
    for r in runs:
        if r["target"] != target:
            continue
        mine, theirs = figure(r), base.get(r["round"])
        if mine is None or theirs is None:
            continue
        if ratio:
            if theirs == 0 or math.isinf(theirs):
                continue
            out.append(mine / theirs)
        elif not (math.isinf(mine) or math.isinf(theirs)):
            out.append(mine - theirs)
    return spread(out)


def summed(runs: list[Run], target: str, figure: Figure) -> float:
    return sum(values(runs, target, figure))
