"""The engine's own sequence cap (``--max-num-seqs``), learned from what it
shows. No I/O, no clock.

vLLM does not publish its ``--max-num-seqs``. Requests waiting in the
engine for several ticks while its KV cache has room and what it runs
stays level say it runs all it may, and admission then keeps the excess in
the gateway's queue instead (beyond it, work would wait in the engine's
FIFO, out of reach of priority, fairness, deadlines and early refusal).
While what it runs still rises, the engine is taking a burst in (prefill
is paced per step) and the wait says nothing of its cap.

What the cap is then: the most sequences the engine has been seen running,
not what it runs at that moment. An engine never runs more than its
``--max-num-seqs``, so that is a bound from below that only grows; a queue
with other causes (a long prompt waiting for blocks its KV usage does not
show free, prefill paced while requests end as fast as they start) would
otherwise set the cap below what the engine has run — and for good, since
the gateway's queue keeps the engine's own empty from then on.

And only what the gateway's own requests can make counts: what the engine
runs and holds waiting no more than the gateway (with its replicas) has
admitted to it. An engine that other clients load as well — a router
beside the gateway, direct calls — runs and queues their work too (the
prefix benchmark's gateways, idle while vllm-router drove the same engines,
learned a cap of 2 and held their engines at 4 sequences for good).
"""


class LearnedCap:
    def __init__(self, patience: int) -> None:
        self.patience = patience
        # None: not learned.
        self.value: int | None = None
        # The most the engine has been seen running (the gateway's requests).
        self._most = 0
        self._level = 0.0
        self._level_ticks = 0

    def observe(
        self, running: float, waiting: float, *, ours: float, room: bool, calm: bool
    ) -> None:
        """One tick: what the engine runs and what waits in it; ``ours``:
        the sequences the gateway has admitted to it; ``room``: its KV cache
        has room; ``calm``: no preemption just now (preempted requests wait
        too)."""
        if ours < running + max(0.0, waiting):
            # Someone else's requests are on the engine: nothing to learn.
            self._level_ticks = 0
            self._level = 0.0
            return
        self._most = max(self._most, int(running))
        if calm and room and waiting > 0 and running > 0:
            rising = running > self._level
            self._level = running
            self._level_ticks = 1 if rising else self._level_ticks + 1
            if self._level_ticks >= self.patience:
                self.value = max(self.value or 0, self._most)
        else:
            self._level_ticks = 0
            self._level = 0.0
