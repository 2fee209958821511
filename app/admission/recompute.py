"""What preemption costs an engine: the work it computes again, as a share of
what it generates. No I/O, no clock: one reading a tick.

vLLM's V1 engine preempts by recompute: a sequence that loses its KV blocks
is computed again from its prompt and what it had written when it is
scheduled next. The engine counts preemptions (``vllm:num_preemptions_total``)
but not what they cost. The estimate here: each preemption recomputes what
a running sequence holds on average at that moment — the cache in use over
the sequences running — against the tokens generated meanwhile
(``vllm:generation_tokens_total``). It is an estimate (the sequence preempted
is the newest or the least important, which holds less than the average),
reported as one.

The share is taken over the last ``WINDOW`` readings, not one: a tick's few
preemptions against a tick's few hundred tokens swing too far either way
to steer by.
"""

import math
from collections import deque
from dataclasses import dataclass

# Readings (about one a second) the share is taken over.
WINDOW = 10


@dataclass(frozen=True)
class EngineReading:
    """One tick of an engine's counters and gauges."""

    preemptions_total: float
    generated_total: float | None
    kv_usage: float
    capacity_tokens: int | None
    running: float


class RecomputeWindow:
    def __init__(self, window: int = WINDOW) -> None:
        self._last: EngineReading | None = None
        # Per tick: (preemptions, tokens recomputed, tokens generated).
        self._ticks: deque[tuple[float, float, float]] = deque(maxlen=window)
        # Since the gateway started, for the metrics (an estimate).
        self.recomputed_total = 0.0

    def observe(self, reading: EngineReading) -> None:
        last, self._last = self._last, reading
        if last is None:
            return
        preempted = max(0.0, reading.preemptions_total - last.preemptions_total)
        # Unknown (the engine does not count it): the share stays unknown.
        generated = math.nan
        if reading.generated_total is not None and last.generated_total is not None:
            generated = max(0.0, reading.generated_total - last.generated_total)
        held = 0.0
        if reading.capacity_tokens and reading.running > 0:
            held = reading.kv_usage * reading.capacity_tokens / reading.running
        recomputed = preempted * held
        self.recomputed_total += recomputed
        self._ticks.append((preempted, recomputed, generated))

    def restart(self) -> None:
        """Measure afresh from the next reading on (after the budget changed)."""
        self._ticks.clear()

    @property
    def last_preempted(self) -> bool:
        """The engine preempted since the reading before the last."""
        return bool(self._ticks) and self._ticks[-1][0] > 0

    def share(self) -> float | None:
        """Tokens recomputed over tokens generated in the window (None:
        nothing generated, or the engine does not count what it generates)."""
        generated = sum(g for _, _, g in self._ticks)
        if not generated > 0:  # none, or not counted (NaN)
            return None
        return sum(r for _, r, _ in self._ticks) / generated
