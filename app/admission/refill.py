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
prepared, so under overload fewer sequences run through the gateway than
direct unless something fills the gap.

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

*Handing on.* The lead follows what once-a-second ticks can see. Streams
admitted together with the same ``max_tokens`` also end together — the
same step, when answers run to their bound — and a whole batch's slots then
empty at once: the engine then runs a fraction of its sequences at every
batch's end while the next batch travels through the gateway and the
engine's API server; direct, the engine's queue holds it ready. So a
stream that will reach its ``max_tokens`` soon, at the pace it has kept,
hands its sequence slot on (``Hold.hand_on``): the next request is
admitted then, waits in the engine's queue, and starts the step the stream
ends. How soon is what the refills travel, as measured: a
batch's places handed on together send their successors to the engine's
API server at once, and it takes them in one after another, so a stream
hands on a margin times the intake of the places handed on with it
(``app.admission.intake``), at most ``refill_ahead_seconds``: little for a
lone stream, much more while a whole batch travels at once (one request's
travel alone handed a fresh gateway's first batch on too late). The pace
counts once measured over half that time: a stream's first tokens can come
in one read, and their pace of nothing handed a place on at once. Tokens
are counted from the events sent, times the tokens an event carried in the
engine's completed streams: under overload it puts several in one, and
counted one an event, most streams would never come within the time ahead
of their bound. Until an
engine's first ``FIRST_STREAMS`` streams have completed (``learning``), the
chat and completion streams that may go to it ask it for their usage in
every chunk (vLLM's continuous usage stats, cut out again for the client:
``app.relay.exact``) and count their tokens from it, so a fresh gateway's
first batch hands its places on when it aims to (counting one token an
event, it did so too late). The mean is the plain average of those first streams,
a running mean after (moved a tenth of the way from one token an event, a
fresh gateway's second batch counted little more than one), and a stream
reads it whenever it checks. Its blocks stay held until it ends, so the KV
budget still counts both. What it costs fairness is the lead's, bounded
in time: a request handed a place waits in the engine's FIFO about that
long at most. A stream that stops earlier, or a non-streamed answer, hands
nothing on (the gateway cannot see its end coming); the lead is for those.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass

from app.admission.intake import Intake

PATIENCE = 3
# The weight of a completed stream in the running mean of an event's tokens.
ALPHA = 0.1
# The completed streams whose plain mean says what an event carries before
# the running mean takes over; until then an engine is still learning it.
FIRST_STREAMS = round(1 / ALPHA)


def _one() -> float:
    return 1.0


def _none() -> float:
    return 0.0


@dataclass(frozen=True)
class HandingOn:
    """When a stream hands its place on: ``ahead()`` seconds before its end
    (0: not yet), its tokens counted as ``tokens_per_event()`` per event
    sent (both read at each check: its engine keeps learning while it
    streams, and the places handed on with it are admitted around it)."""

    ahead: Callable[[], float] = _none
    tokens_per_event: Callable[[], float] = _one


class RefillLead:
    def __init__(self, max_lead: int) -> None:
        self.max_lead = max_lead
        self.lead = 0
        self._deep = 0
        self._empty = 0
        # What a refill takes to reach the engine.
        self.intake = Intake()
        # Tokens per stream event, as completed streams showed (a running
        # mean): under load the engine puts several tokens in one event.
        self.tokens_per_event = 1.0
        self._streams = 0

    def streamed(self, tokens: int, events: int) -> None:
        """A completed stream had ``tokens`` of output in ``events`` events."""
        if events > 0 and tokens >= events:
            # The plain mean of the first streams, a running mean after.
            self._streams += 1
            weight = 1.0 / min(self._streams, FIRST_STREAMS)
            self.tokens_per_event += weight * (tokens / events - self.tokens_per_event)

    def carried(self) -> float:
        """Tokens per stream event, as the engine's completed streams showed."""
        return self.tokens_per_event

    @property
    def learning(self) -> bool:
        """Fewer than ``FIRST_STREAMS`` of the engine's streams completed:
        what an event carries is not known yet, and streams count their
        tokens from the usage the engine puts in each chunk."""
        return self._streams < FIRST_STREAMS

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
