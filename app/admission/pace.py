"""Pacing starts on an engine whose KV cache, not its sequence cap, bounds
it. No I/O; the time is given.

A sequence holds ``ceil((prompt + written + 1) / block)`` blocks while its
engine writes its output, and frees them all at its end. Each reserved at its
worst case, requests admitted together end together, and the cache then holds
as many as fit at their largest at once. Spread over their lives they hold
about half that each on average, and the same cache runs more of them
without a preemption (``benchmarks.overhead.bound`` computes that bound).
Admitting while the cache's *future* peak fits does not spread them on its
own: a batch freed at once is refilled at once.

So where the cache binds, starts are paced: one every ``gap`` engine steps —
a sequence's life over what the budget holds of them on average — each only
if the cache's future peak stays within the budget, every open sequence's
blocks counted as it will write them. A start the dispatch makes late (the
event loop is busy relaying) is made up by the next ones, up to ``CATCH_UP``
gaps, so lateness does not stretch every gap after it; more than that is not
made up, since starts bunched together end together too.

The engine's steps are measured in time: every running sequence writes one
token a step, so a completed stream's seconds per token is the engine's
step. Where a stream stands is its seconds since its first token over the
step, or what its relay has sent if that is further; each is counted
``AHEAD`` tokens further still (the relay reads behind the engine). One
admitted whose first token has not come back may have started any time
since its admission: it holds from then on, and frees no sooner than if it
started now.

What it reaches against the bound and the worst-case reservations is in
docs/benchmarks.md; pacing applies only where the cache binds,
so an engine whose sequence cap binds first admits as before.
"""

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

# Tokens a stream is counted ahead of where it is seen.
AHEAD = 8
# A running stream's pace counts once it has written this many tokens.
_PACE_TOKENS = 8
# Gaps of lateness made up by the next starts.
CATCH_UP = 2.0
# Weight of one completed stream in the engine's step.
_STEP_WEIGHT = 0.2

# What a stream has written (its relay's count) and its seconds since its
# first token; None before its first token.
Progress = Callable[[], tuple[float, float] | None]


@dataclass(frozen=True)
class Life:
    """One sequence's prompt and most output, in tokens."""

    prompt: int
    output: int


def held(prompt: int, written: float, block: int) -> int:
    """Blocks a sequence holds while its engine writes the token after ``written``."""
    return math.ceil((prompt + written + 1) / block)


def worst(life: Life, block: int) -> int:
    """The blocks it holds at its end."""
    return held(life.prompt, life.output - 1, block)


def gap_steps(life: Life, block: int, budget: int) -> float:
    """Engine steps between two starts: a life over the sequences like it
    that ``budget`` blocks hold on average."""
    mean = sum(held(life.prompt, g, block) for g in range(life.output)) / life.output
    return life.output * mean / max(1, budget)


@dataclass(frozen=True)
class Span:
    """A sequence from now on: it stands at ``early`` tokens written at the
    furthest and ``late`` at the least, so it takes its blocks as if at
    ``early`` and frees them as if at ``late``."""

    life: Life
    early: float = 0.0
    late: float = 0.0


def future_peak(spans: Iterable[Span], block: int) -> int:
    """The most blocks ``spans`` hold at once from now on, every sequence
    writing a token a step. Blocks taken in a step count before those freed
    in it."""
    level = 0
    changes: dict[int, list[int]] = {}
    for span in spans:
        prompt, output = span.life.prompt, span.life.output
        early = min(span.early, output - 1)
        blocks = held(prompt, early, block)
        level += blocks
        end = max(1, math.ceil(output - span.late))
        # It takes a block each time its tokens pass a block's end...
        tokens = prompt + math.floor(early) + 1
        step = math.ceil(tokens / block) * block - tokens + 1
        while blocks < worst(span.life, block) and step < end:
            changes.setdefault(step, [0, 0])[0] += 1
            blocks += 1
            step += block
        # ...and frees them all at its end.
        changes.setdefault(end, [0, 0])[1] += blocks
    peak = level
    for step in sorted(changes):
        taken, freed = changes[step]
        peak = max(peak, level + taken)
        level += taken - freed
    return peak


@dataclass(eq=False)
class Open:
    """A request admitted to the engine, its sequences' lives and, once its
    stream runs, its progress."""

    lives: tuple[Life, ...]
    admitted_at: float
    progress: Progress | None = None

    def seen(self) -> tuple[float, float] | None:
        """(tokens written per sequence, seconds since its first token)."""
        seen = self.progress() if self.progress is not None else None
        if seen is None:
            return None
        return seen[0] / len(self.lives), seen[1]


class PacedStarts:
    """One engine's open requests, the engine's step, and when its next
    start may be."""

    def __init__(self) -> None:
        self.open: list[Open] = []
        self.next_at = 0.0
        # Seconds per step, from completed streams (None: none yet).
        self.completed_step: float | None = None

    def step(self) -> float | None:
        """The engine's seconds per step: from completed streams, or before
        one completed, the median pace of the running ones."""
        if self.completed_step is not None:
            return self.completed_step
        paces = sorted(
            seconds / written
            for seen in (entry.seen() for entry in self.open)
            if seen is not None
            for written, seconds in [seen]
            if written >= _PACE_TOKENS
        )
        return paces[len(paces) // 2] if paces else None

    def spans(self, now: float, step: float) -> list[Span]:
        spans = []
        for entry in self.open:
            seen = entry.seen()
            if seen is None:
                early, late = (now - entry.admitted_at) / step + AHEAD, 0.0
            else:
                aged = seen[1] / step
                early, late = max(seen[0], aged) + AHEAD, min(seen[0], aged)
            spans += [Span(life, early, late) for life in entry.lives]
        return spans

    def fits(self, lives: tuple[Life, ...], budget: int, block: int, now: float) -> bool | None:
        """Whether a request of ``lives`` may start now; None: no clock to
        pace by yet (nothing has run long enough to show the step)."""
        step = self.step()
        if step is None:
            return None
        if now < self.next_at:
            return False
        candidate = [Span(life) for life in lives]
        return future_peak(self.spans(now, step) + candidate, block) <= budget

    def started(self, entry: Open, budget: int, block: int) -> None:
        """``entry`` was admitted: the next start is a gap after the one it
        was due at, lateness beyond ``CATCH_UP`` gaps not made up."""
        self.open.append(entry)
        step = self.step()
        if step is not None:
            gap = gap_steps(entry.lives[0], block, budget) * step
            self.next_at = max(self.next_at, entry.admitted_at - CATCH_UP * gap) + gap

    def completed(self, entry: Open, tokens: int) -> None:
        """Its stream completed with ``tokens`` of output: the engine's step."""
        seen = entry.seen()
        per_sequence = tokens / len(entry.lives)
        if seen is None or per_sequence < 2 * _PACE_TOKENS:
            return
        step = seen[1] / (per_sequence - 1)
        last = self.completed_step
        self.completed_step = step if last is None else last + _STEP_WEIGHT * (step - last)

    def ended(self, entry: Open) -> None:
        if entry in self.open:
            self.open.remove(entry)
