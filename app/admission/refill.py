"""Keeping an engine full: a shallow queue in the engine itself, no deeper
than it must be. No I/O, no clock.

The gateway admits no more sequences than the engine runs at once
(``--max-num-seqs``, learned or set): beyond it, work would wait in the
engine's FIFO, out of reach of priority, fairness, deadlines and early
refusal. But a slot the gateway holds is not a sequence the engine runs: a
freed slot is refilled only after the finished stream's end has come through
the relay and the next request has travelled to the engine — its API server
renders and tokenizes it, its scheduler takes it at the next step. vLLM
direct has no such gap: its own queue holds the next request, already
prepared. Under overload the gap was measured at 111–116 sequences running
of 128 through the gateway (124–125 direct).

So each engine has a *lead*: sequences admitted beyond its cap, which wait in
the engine's own queue and fill a slot the step it frees. The lead follows
what the engine shows, once a tick, and only while the cap is what holds
requests back (requests queued in the gateway, every slot of the cap and the
lead held; when the KV budget holds them back, empty slots say nothing of
the refill):

- fewer running than the cap and none waiting in the engine, ``PATIENCE``
  ticks in a row: slots sat empty with work queued in the gateway — the lead
  grows by half the gap (one tick proves nothing: a request admitted a
  moment ago may still be on its way to the engine);
- the engine at its cap with requests of its own waiting, ``PATIENCE`` ticks
  in a row: its queue is deeper than the refill needs — the lead shrinks by
  one;

never above ``max_lead``; with the gateway's queue empty it decays by one a
tick. What it costs fairness: at most ``lead`` admitted requests wait in the
engine's FIFO, so a request of a higher class or a lighter tenant arriving
then is served after them — after about ``lead`` completions, a fraction of
a second under overload — and once admitted, its deadline no longer applies.
"""

import math

PATIENCE = 3


class RefillLead:
    def __init__(self, max_lead: int) -> None:
        self.max_lead = max_lead
        self.lead = 0
        self._deep = 0
        self._empty = 0

    def observe(
        self, cap: int, running: float, waiting: float, *, queued: bool, at_cap: bool
    ) -> None:
        """One tick: the engine's sequence ``cap`` (without the lead), what
        it runs and what waits in it; ``queued``: requests wait in the
        gateway's queue; ``at_cap``: the gateway holds every slot it may."""
        if not queued or not at_cap:
            if not queued:
                self.lead = max(0, self.lead - 1)
            self._deep = self._empty = 0
        elif running < cap and waiting <= 0:
            self._deep = 0
            self._empty += 1
            if self._empty >= PATIENCE:
                self.lead = min(self.max_lead, self.lead + math.ceil((cap - running) / 2))
                self._empty = 0
        elif running >= cap and waiting > 0:
            self._empty = 0
            self._deep += 1
            if self._deep >= PATIENCE:
                self.lead = max(0, self.lead - 1)
                self._deep = 0
        else:
            self._deep = self._empty = 0
