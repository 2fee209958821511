"""The engine's own sequence cap (``--max-num-seqs``), learned from what it
shows, and re-tested. No I/O, no clock.

vLLM does not publish its ``--max-num-seqs``. Requests waiting in the
engine for several ticks while its KV cache has room and what it runs
stays level say it runs all it may: what it runs then is its cap, and
admission keeps the excess in the gateway's queue instead (beyond it, work
would wait in the engine's FIFO, out of reach of priority, fairness,
deadlines and early refusal). While what it runs still rises, the engine is
taking a burst in (prefill is paced per step) and the wait says nothing of
its cap.

A queue in the engine has other causes still — a long prompt waiting for
blocks its KV usage does not show free, prefill paced per step while
requests end as fast as they start — and a cap learned then would hold the
engine below what it runs for good: the gateway's queue keeps the engine's
own empty from then on, so nothing would ever show the cap wrong (measured:
4 sequences an engine on the prefix benchmark's 8 documents, its KV cache
half used, the gateway's queue a second and a half deep). So the cap is
re-tested: while requests wait in the gateway, the engine runs its whole
cap, none waits in it and its cache has room, ``patience`` ticks in a row,
the cap grows by a quarter. The engine queueing again at a level it holds
says where it stops; the cap never falls below the most it has run with a
queue of its own.

And only a queue the gateway's own requests can make teaches anything:
what the engine runs and holds waiting no more than the gateway (with its
replicas) has admitted to it. An engine that other clients load as well —
a router beside the gateway, direct calls — queues their work too (the
prefix benchmark's gateways, idle while vllm-router drove the same engines,
learned a cap of 2).
"""

import math


class LearnedCap:
    def __init__(self, patience: int, ceiling: int) -> None:
        self.patience = patience
        # Past this the cap is no cap (admission's own ``max_sequences``).
        self.ceiling = ceiling
        # None: not learned (or grown past the ceiling).
        self.value: int | None = None
        # The most the engine has run with requests waiting in it.
        self._proven = 0
        self._level = 0.0
        self._level_ticks = 0
        self._probe_ticks = 0

    def observe(
        self,
        running: float,
        waiting: float,
        *,
        ours: float,
        room: bool,
        calm: bool,
        queued: bool,
    ) -> None:
        """One tick: what the engine runs and what waits in it; ``ours``:
        the sequences the gateway has admitted to it; ``room``: its KV cache
        has room; ``calm``: no preemption just now (preempted requests wait
        too); ``queued``: requests wait in the gateway."""
        if calm and room and waiting > 0 and running > 0 and ours >= running + waiting:
            self._probe_ticks = 0
            rising = running > self._level
            self._level = running
            self._level_ticks = 1 if rising else self._level_ticks + 1
            if self._level_ticks >= self.patience:
                self._proven = max(self._proven, int(running))
                self.value = self._proven
            return
        self._level_ticks = 0
        self._level = 0.0
        cap = self.value
        if cap is None or not (calm and room and queued and waiting <= 0 and running >= cap):
            self._probe_ticks = 0
            return
        self._probe_ticks += 1
        if self._probe_ticks >= self.patience:
            self._probe_ticks = 0
            raised = cap + max(1, math.ceil(cap / 4))
            self.value = None if raised >= self.ceiling else raised
