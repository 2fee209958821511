"""The admission policy: state and decisions only — no I/O, no clock, no asyncio.

What it decides, and why
------------------------
vLLM degrades in two stages: while the KV cache has room, more concurrent
requests mostly cost per-user latency; once it runs out, the scheduler
preempts running requests and recomputes them later, and everyone's latency
jumps while useful throughput falls. The policy keeps the engine on the
graceful side of that knee.

*Demand.* Each sequence needs KV blocks for its prompt and its output:
``ceil((prompt + max_output) / block_size)``; a request runs one sequence
per prompt of a batch, times ``n``. vLLM allocates blocks as tokens appear,
so this is the request's worst case, not what it holds now. The engine
holds no extra block per request, but one block of the cache is never the
requests': vLLM's block pool keeps it as its null block. The budget counts
the blocks requests can hold (``EngineBudget.usable_blocks``). Prompts are
counted with the model's tokenizer (``app.tokens``), so the worst case is
the request's real one.

*No request halts the others.* A request without ``max_tokens`` asks for the
whole context; ``n = 16`` multiplies any request by 16. Counted at face
value, such a request could need the whole budget, wait at the head until
nothing else is in flight, and hold everyone behind it meanwhile. So what a
request is charged — in blocks and in sequences against the concurrency
cap — is its demand capped at ``max_request_share`` of the budget and of the
cap (half, by default): the head of the queue then waits at most until half
the engine frees, never for it to empty. Requests that really use more than
they are charged are the overcommit's business: the engine's preemptions
shrink the budget (below). What can never fit at all — a prompt longer than
the context, a smallest demand larger than the whole cache — is refused
before it is queued (``app.admission.demand``), never left waiting.

*Budget and overcommit.* Reserving every request's worst case is safe — the
engine can never run out of blocks — but wasteful: most answers end well
before ``max_tokens``. So the policy admits requests while the sum of their
worst cases fits in ``capacity × factor``, where ``factor`` (the overcommit)
moves with what the engine shows, additive-increase / multiplicative-decrease:

- the engine's preemption counter rose → ``factor ×= backoff`` and no
  increase for a few ticks: we went past the knee, step back fast;
- requests are queued, the engine's KV usage stayed under ``headroom`` for
  ``patience`` ticks in a row → ``factor += step``: the queue waits on
  reservations that are not turning into real usage, so open up slowly;
- ``factor`` never goes above what completed requests justify, nor outside
  ``[min_factor, max_factor]``. A request's KV peaks at its prompt plus the
  output it actually writes, and a burst of requests admitted together
  reaches those peaks together: the ceiling is the ratio of what completed
  requests reserved to those peaks (1 when answers use all of
  ``max_tokens``, more as they stop earlier). Until a request has
  completed nothing justifies more than the worst case, so a fresh gateway
  (or a new workload's first burst) never probes past the engine's
  capacity (``overcommit_initial`` above 1 says otherwise). Every replica
  and every engine learns the same from the same workload, so none probes
  on its own. (Averaging what requests hold over their lives instead — the
  prompt plus half the output — would justify about 2 for full-length
  answers: true of a steady stream at staggered stages, but a burst of such
  answers is preempted.)

*Paced starts.* Where an engine's cache, not its sequence cap, bounds how
many run, the stages can be staggered on purpose: requests start one at a
time, a life over what the cache holds of them on average apart, each while
the cache's future peak — every open sequence's blocks as it will write
them — fits the budget, instead of while the sum of worst cases does
(``app.admission.pace``). Until a stream has run long enough to show the
engine's step, the sum of worst cases decides.

*When the engine cannot be seen.* If the engine's ``/metrics`` lacks the
KV cache's size, the budget is unknown and at most
``unknown_capacity_sequences`` sequences run at once; if it lacks the
preemption counter or KV usage, the factor stays at its floor, since
neither backing off nor opening up can be judged. Neither state is silent
(``gateway_engine_stats_missing``, a log line, an alert).

*Engines.* Each engine has a budget of its own (``EngineBudget``): its
capacity from its own metrics, its own overcommit factor, its own sequence
cap (its ``--max-num-seqs``, set or learned: the engine keeping requests
waiting while its KV cache has room means it runs all it may, and what runs
beyond that would wait in the engine's FIFO, out of reach of priority,
fairness, deadlines and early refusal). A request may go to an engine that is
up, serves its model and is not excluded (a retry avoids the engine that
failed it); among those where it fits now, the router picks
(``app.routing``). An engine that goes down takes no new request; what waits
goes elsewhere.

*Order.* Waiting requests are served by priority class first (high, normal,
low), then by fair share between tenants within a class — the tenant that
has been admitted the fewest tokens goes next (start-time fair queuing, so a
tenant that was idle does not bank credit), then by arrival
(``FairQueue``). The head of the order waits until it fits some engine;
nothing overtakes it, so large requests are not starved by small ones; the
cap above bounds how long it can hold them. Only requests for a model whose
engines are full wait behind such a head: a request for another model goes
on. One waiter is passed over instead of waited behind: a request that
waits by choice for the engine holding its prompt (``affinity_wait``,
``app.routing.router``) keeps its place while the ones behind it go — for
a bounded time, after which it is placed where it fits like any other. It
waits only while others use the room it could take elsewhere: an engine
with nothing in flight it takes at once (``affinity_steal`` ``idle``, the
default: beside running requests its prompt would evict theirs), or, with
``room``, any room no one behind it took in a dispatch round.

*Refusing early, and Retry-After.* A new request whose predicted wait is
surely longer than the queue's deadline is refused at once rather than after it
(``queue_forecast``) — unless the order would admit it at once (nothing
before it waits, an engine has room) — and so is any request beyond the
queue's maximum depth or bytes (``queue_full``). How the wait is predicted,
when the prediction may refuse, and what a refused client is told, is
``app.admission.forecast``.
"""

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Literal

from app.admission.budget import BudgetConfig, EngineBudget, Reservation
from app.admission.fairqueue import FairQueue, Waiter
from app.admission.forecast import Forecast, QueuePlace
from app.admission.pace import Progress
from app.admission.refill import HandingOn
from app.engine.view import EngineView
from app.request.identity import PRIORITIES
from app.routing.base import Choice, RouteRequest, Wait
from app.routing.router import Router
from app.settings import default

__all__ = [
    "AdmissionPolicy",
    "Decision",
    "PolicyConfig",
    "QueueFull",
    "QueuePlace",
    "Reservation",
    "Waiter",
]


@dataclass(frozen=True)
class PolicyConfig:
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    max_queue_depth: int = default("queue_max_depth")
    # What the waiting requests' bodies may add up to, in bytes.
    max_queue_bytes: int = default("queue_max_bytes")
    # Longest wait in the queue (the controller's deadline).
    max_wait: float = default("queue_timeout")
    max_retry_after: float = 60.0
    cold_turnover: float = 2.0
    # How long a request may wait for the engine that reports holding the
    # most of its prompt (prefix routing with KV cache events) while another
    # has room (``app.routing.prefix``); 0: never.
    affinity_wait: float = default("routing_affinity_wait")
    # Where such a waiter takes room elsewhere: only on an engine with
    # nothing in flight (``idle``), or any no one behind it took (``room``).
    affinity_steal: Literal["room", "idle"] = default("routing_affinity_steal")


@dataclass(frozen=True)
class Decision:
    """``waiter`` goes to ``budget``'s engine next (``choice``: why)."""

    waiter: Waiter
    budget: EngineBudget
    choice: Choice
    # When it was decided (what ``commit`` admits, it admits then).
    at: float = 0.0


class QueueFull(Exception):
    """A new request refused before it is queued; ``reason`` is its
    rejection reason (``gateway_rejections_total``)."""

    def __init__(
        self,
        retry_after: float,
        reason: str = "queue_full",
        message: str = "the gateway's queue is full",
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.reason = reason
        self.message = message


class AdmissionPolicy:
    def __init__(self, config: PolicyConfig | None = None, router: Router | None = None) -> None:
        self.config = config or PolicyConfig()
        self.router = router or Router()
        self.engines: dict[str, EngineBudget] = {}
        self.queue = FairQueue()
        self.forecast = Forecast(
            self.queue,
            max_wait=self.config.max_wait,
            max_retry_after=self.config.max_retry_after,
            cold_turnover=self.config.cold_turnover,
        )
        self._round = 0
        # No timer for a waiter's wait to end: room it could take elsewhere
        # that no one else took, it takes in the round that frees it
        # (``decide``), so its wait ending changes nothing until the next
        # release or arrival, which looks again anyway.
        self._reserved_done = 0.0
        self._peak_done = 0.0

    # --- engines ----------------------------------------------------------------

    def engine(self, engine: str) -> EngineBudget:
        """The budget of ``engine``, made on first use."""
        if engine not in self.engines:
            self.engines[engine] = EngineBudget(engine, self.config.budget)
        return self.engines[engine]

    def add_engine(self, view: EngineView) -> EngineBudget:
        """An engine joined the fleet: its budget reads ``view``."""
        budget = self.engine(view.url)
        budget.view = view
        return budget

    def forget_engine(self, engine: str) -> None:
        """An engine that left the fleet (no longer discovered)."""
        self.engines.pop(engine, None)

    @property
    def in_flight(self) -> int:
        return sum(b.in_flight for b in self.engines.values())

    @property
    def capacity_tokens(self) -> int | None:
        known = [b.capacity_tokens for b in self.engines.values() if b.up and b.capacity_tokens]
        return sum(known) if known else None

    # --- the queue ----------------------------------------------------------------

    @property
    def queued(self) -> int:
        return len(self.queue)

    def enqueue(self, waiter: Waiter, now: float, *, front: bool = False) -> None:
        """Queue a request, or raise ``QueueFull`` if the queue is at its
        depth or its bytes (``queue_full``), or the predicted wait is longer
        than the deadline (``queue_forecast``; not if it would be admitted
        at once). ``front``: a retry, which already waited its turn."""
        if not front:
            self._refuse_if_full(waiter, now)
        waiter.round = self._round
        self.queue.add(waiter, front=front)
        self.forecast.drain.tick(now, backlog=True, in_flight=self.in_flight)

    def _refuse_if_full(self, waiter: Waiter, now: float) -> None:
        config, w, forecast = self.config, waiter, self.forecast
        forecast.drain.tick(now, backlog=self.queued > 0, in_flight=self.in_flight)
        told = partial(forecast.retry_after, now, self.capacity_tokens, w.tokens, w.tenant)
        full = (
            self.queued >= config.max_queue_depth
            or self.queue.size + w.size > config.max_queue_bytes
        )
        # A full queue refuses what would wait in it, not what an engine
        # takes now (a depth of 0: no waiting at all, not no requests).
        if full and not self._admitted_at_once(w, now):
            raise QueueFull(told(w.priority))
        wait = forecast.wait(w.priority, w.tokens, w.tenant)
        if wait is not None and forecast.outwaits(wait) and not self._admitted_at_once(w, now):
            raise QueueFull(
                told(w.priority, may_queue=True),
                reason="queue_forecast",
                message="the gateway's queue would not admit this request within its deadline",
            )

    def _admitted_at_once(self, waiter: Waiter, now: float) -> bool:
        """Nothing the order admits before it waits, and an engine has room
        for it now: it waits for nothing, whatever the drain rate says."""
        return self.queue.tokens_ahead(waiter.priority, waiter.tenant) == 0 and isinstance(
            self._place(waiter, now), tuple
        )

    def remove(self, waiter: Waiter) -> bool:
        """Take a waiter out (its client left, or its deadline passed)."""
        return self.queue.remove(waiter)

    def drain_queue(self) -> list[Waiter]:
        """Empty the queue (shutdown); returns who was in it."""
        return self.queue.drain()

    def pop_admissible(self, now: float) -> tuple[list[tuple[Waiter, Reservation]], list[Waiter]]:
        """Admit waiters in order while the head of the order fits some
        engine. Waiters whose deadline has passed are taken out instead
        (second list)."""
        admitted: list[tuple[Waiter, Reservation]] = []
        expired: list[Waiter] = []
        passed: set[Waiter] = set()
        while True:
            decision, late = self.decide(now, passed)
            expired += late
            if decision is None:
                return admitted, expired
            reservation = self.commit(decision)
            admitted.append((decision.waiter, reservation))

    def decide(
        self, now: float, passed: set[Waiter] | None = None
    ) -> tuple["Decision | None", list[Waiter]]:
        """The next admission the order allows, not made yet (``commit``
        makes it), and the waiters whose deadline passed (taken out).
        ``passed``: the waiters this dispatch round found waiting for their
        prefix's engine (they hold their places; the next of their tenant's
        stand in for them), kept across the round's calls."""
        # The drain's clock up to now: what ``commit`` admits, it admits now.
        self.forecast.drain.tick(now, backlog=self.queued > 0, in_flight=self.in_flight)
        expired: list[Waiter] = []
        full_models: set[str] = set()
        passed = set() if passed is None else passed
        while (waiter := self.queue.head(skip=full_models, passed=passed)) is not None:
            if waiter.deadline <= now:
                self.queue.remove(waiter)
                expired.append(waiter)
                continue
            placed = self._place(waiter, now, may_wait=True)
            if isinstance(placed, Wait):
                waiter.waited_for = placed.engine
                passed.add(waiter)
                continue
            if placed is not None:
                budget, choice = placed
                return Decision(waiter, budget, choice, now), expired
            full_models.add(waiter.model)
        # The end of a dispatch round. A waiter waiting for its prompt's
        # engine takes room elsewhere that no one behind it took, where
        # ``_may_take`` lets it: it waits while others can use that room,
        # never beside an idle engine.
        for waiter in sorted(passed, key=lambda w: (PRIORITIES.index(w.priority), w.arrival)):
            placed = self._place(waiter, now) if waiter.deadline > now else None
            if placed is not None and not isinstance(placed, Wait) and self._may_take(placed[0]):
                passed.discard(waiter)
                budget, choice = placed
                return Decision(waiter, budget, choice, now), expired
        self.forecast.drain.tick(now, backlog=self.queued > 0, in_flight=self.in_flight)
        self._round += 1
        return None, expired

    def _may_take(self, budget: EngineBudget) -> bool:
        """Whether a waiter for its prompt's engine may take room on ``budget``'s."""
        if self.config.affinity_steal == "room":
            return True
        return budget.in_flight + budget.others_in_flight == 0

    def commit(self, decision: "Decision") -> Reservation:
        waiter = decision.waiter
        self.queue.admit(waiter)
        if waiter.round < self._round:
            self.forecast.drain.admitted(waiter.tokens)
        reservation = decision.budget.reserve(waiter, decision.at)
        reservation.choice = decision.choice
        if waiter.waited_for is not None:
            reservation.choice = replace(decision.choice, waited_for=waiter.waited_for)
        return reservation

    def still_queued(self, waiter: Waiter) -> bool:
        return any(w is waiter for w in self.queue)

    def place(self, waiter: Waiter) -> QueuePlace | None:
        """Where a waiter stands in the order (None: not queued)."""
        if not self.still_queued(waiter):
            return None
        return self.forecast.place(waiter, self.capacity_tokens)

    def _place(
        self, waiter: Waiter, now: float, *, may_wait: bool = False
    ) -> tuple[EngineBudget, Choice] | Wait | None:
        """Where ``waiter`` goes at ``now``; ``Wait``: it waits for its
        prefix's engine, which it may (``may_wait``) until ``affinity_wait``
        after it arrived."""
        may_wait = may_wait and now < waiter.arrival + self.config.affinity_wait
        request = RouteRequest(
            waiter.model, waiter.affinity, waiter.excluded, waiter.pinned, waiter.prompt, may_wait
        )
        choice = self.router.choose(request, [b.load(waiter, now) for b in self.engines.values()])
        if not isinstance(choice, Choice):
            return choice
        return self.engines[choice.engine], choice

    # --- reservations ---------------------------------------------------------

    def opened(self, reservation: Reservation, travel: float, most: float) -> HandingOn:
        """Its engine answered the stream's call ``travel`` seconds after
        admission; when it hands its place on (at most ``most`` seconds
        before its end; ``app.admission.refill``, *Handing on*)."""
        budget = self.engines.get(reservation.engine)
        if budget is None:
            return HandingOn()
        refill, admitted_at = budget.refill, reservation.admitted_at
        refill.intake.travelled(travel, admitted_at)
        return HandingOn(partial(refill.intake.ahead, most, admitted_at), refill.carried)

    def learning_events(self, model: str) -> bool:
        """Whether an engine up and serving ``model`` has yet to learn what
        a stream's event carries (``app.admission.refill``, *Handing on*)."""
        return any(
            budget.refill.learning
            for budget in self.engines.values()
            if budget.up and model in budget.models
        )

    def streamed(self, reservation: Reservation, tokens: int, events: int) -> None:
        """Its stream completed: ``tokens`` of output in ``events`` events."""
        budget = self.engines.get(reservation.engine)
        if budget is not None:
            budget.refill.streamed(tokens, events)
            if reservation.paced is not None:
                budget.pace.completed(reservation.paced, tokens)

    def writing(self, reservation: Reservation, progress: Progress) -> None:
        """Its stream runs: ``progress`` says how far (``app.admission.pace``)."""
        if reservation.paced is not None:
            reservation.paced.progress = progress

    def paced_wake(self, now: float) -> float | None:
        """Seconds until an engine's next paced start is due, while requests
        wait (0: due now; None: nothing waits on a pace)."""
        if not self.queue:
            return None
        due = [
            max(0.0, budget.pace.next_at - now)
            for budget in self.engines.values()
            if budget.pace.open
        ]
        return min(due) if due else None

    def hand_on(self, reservation: Reservation) -> bool:
        """Its request is about to end (``app.admission.refill``, *Handing
        on*): its sequence slots go to whoever is next, its blocks stay until
        it is released. False (and no change) if it was handed on or
        released already."""
        if reservation.released or reservation.handed_on:
            return False
        reservation.handed_on = True
        budget = self.engines.get(reservation.engine)
        if budget is not None:
            budget.hand_on(reservation)
        return True

    def release(self, reservation: Reservation, used: tuple[int, int] | None = None) -> bool:
        """Give a reservation back; False (and no change) if it already was.
        ``used`` — (prompt, output) tokens of a completed request — feeds the
        overcommit ceiling."""
        if reservation.released:
            return False
        reservation.released = True
        self.forecast.drain.ended()
        budget = self.engines.get(reservation.engine)
        if budget is not None:
            budget.release(reservation)
        if used is not None:
            prompt, output = used
            peak = prompt + output
            if peak > 0:
                decay = 0.98
                self._reserved_done = self._reserved_done * decay + reservation.tokens
                self._peak_done = self._peak_done * decay + peak
        return True

    # --- adapting to the engines --------------------------------------------------

    def overcommit_ceiling(self) -> float:
        """How far completed requests justify overcommitting: what they
        reserved over what they held at their peak; before any completed,
        the worst case (or ``initial_factor``, if set above it)."""
        budget = self.config.budget
        if self._peak_done <= 0:
            return min(budget.max_factor, max(1.0, budget.initial_factor))
        ratio = self._reserved_done / self._peak_done
        return max(budget.min_factor, min(budget.max_factor, ratio))

    def observe_engine(self, engine: str, preemptions_total: float, kv_usage: float) -> None:
        """One tick of an engine's facts (about once a second)."""
        self.engine(engine).observe(
            preemptions_total, kv_usage, self.queued > 0, self.overcommit_ceiling()
        )

    # --- telling clients when to come back ----------------------------------

    def retry_after(
        self, now: float, tokens: int = 0, tenant: str = "", priority: str | None = None
    ) -> float:
        """Seconds a refused request of ``tokens`` should wait before coming
        back; books that time for ``tenant`` (``Forecast.retry_after``)."""
        self.forecast.drain.tick(now, backlog=self.queued > 0, in_flight=self.in_flight)
        return self.forecast.retry_after(now, self.capacity_tokens, tokens, tenant, priority)

    # --- for tests and invariants --------------------------------------------

    def waiters(self) -> Iterator[Waiter]:
        yield from self.queue
