"""The admission policy: state and decisions only — no I/O, no clock, no asyncio.

What it decides, each piece in a module of its own (the reasoning, for an
operator, is docs/admission.md):

- where a request may go and whether it fits there: each engine's budget of
  KV blocks and sequences, its overcommit held to what preemption may cost
  (``app.admission.budget``, ``app.admission.recompute``), its learned
  sequence cap (``app.admission.sequence_cap``), paced starts where the cache binds
  (``app.admission.pace``); the router picks among the engines where it
  fits (``app.routing``);
- in what order waiting requests go: class, then fair share between
  tenants, then each request's deadline (``app.admission.fairqueue``; the
  classes: ``app.admission.classes``). The head of the order is not
  overtaken: only requests for a model whose engines are full wait behind
  it; one waiting by choice for the engine that holds its prompt
  (``affinity_wait``) keeps its place while the ones behind it go;
- what is refused, and what a refused client is told: at arrival only when
  the forecast misses the request's own objective, later when the objective
  passes while it waits, or when the queue is at its depth or bytes
  (``app.admission.forecast``); a request that can never fit is refused
  before it is queued (``app.admission.demand``);
- what running request is stopped for a higher class that would miss its
  objective (``app.admission.eviction``).

No request halts the others: what a request is charged, in blocks and in
sequences, is its worst case capped at ``max_request_share`` of an engine's
budget and cap, so the head of the queue waits at most until that much of
the engine frees, never for it to empty; requests that use more than they
are charged are the overcommit's business.
"""

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Literal

from app.admission.budget import BudgetConfig, EngineBudget, Reservation
from app.admission.classes import ClassTable, default_table
from app.admission.cold import ColdStarts
from app.admission.eviction import Eviction, Evictor
from app.admission.fairqueue import FairQueue, Waiter
from app.admission.forecast import Forecast, QueuePlace
from app.admission.overflow import making_room
from app.admission.recompute import EngineReading
from app.engine.view import EngineView
from app.request.identity import PRIORITIES
from app.routing.base import Choice, RouteRequest, Wait
from app.routing.router import Router
from app.settings import default

# The weight of an admitted stream's first token in ``first_token_lag``.
_LAG_WEIGHT = 0.1

__all__ = [
    "AdmissionPolicy",
    "Decision",
    "PolicyConfig",
    "PushedOut",
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
    # The default objective, and the longest a Retry-After promises.
    max_wait: float = default("queue_timeout")
    # The classes: rank, objective, sheddable, the engine's priority.
    classes: ClassTable = field(default_factory=default_table)
    # Most requests stopped for a higher class, per engine and second.
    evictions_per_second: float = default("evictions_per_second")
    max_retry_after: float = 60.0
    cold_turnover: float = 2.0
    # How long a request may wait for the engine that reports holding the
    # most of its prompt (prefix routing with KV cache events) while another
    # has room (``app.routing.prefix``); 0: never.
    affinity_wait: float = default("routing_affinity_wait")
    # Where such a waiter takes room elsewhere: only on an engine with
    # nothing in flight (``idle``), or any no one behind it took (``room``).
    affinity_steal: Literal["room", "idle"] = default("routing_affinity_steal")
    # Scale from zero: the models whose requests are held while no engine
    # serves them, and for how long (``app.admission.cold``).
    cold_models: frozenset[str] = frozenset()
    cold_start_timeout: float = default("cold_start_timeout")


@dataclass(frozen=True)
class Decision:
    """``waiter`` goes to ``budget``'s engine next (``choice``: why)."""

    waiter: Waiter
    budget: EngineBudget
    choice: Choice
    # When it was decided (what ``commit`` admits, it admits then).
    at: float = 0.0


@dataclass(frozen=True)
class PushedOut:
    """A waiter that gave its place in the full queue to a lighter tenant's
    or a higher class's request (``app.admission.overflow``), and when it
    should come back."""

    waiter: Waiter
    retry_after: float


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
        # Seconds from admission to a stream's first token, a running mean
        # of what admitted streams took (the engine's queue, its prefill, the
        # way there): what a request's objective must leave after it is
        # admitted.
        self.first_token_lag = 0.0
        # Room made for higher classes (``app.admission.eviction``).
        self.evictor = Evictor(self.config.evictions_per_second)
        self._evictions: list[Eviction] = []
        self._sheddable_ranks = frozenset(
            c.rank for c in self.config.classes.values() if c.sheddable
        )
        self.cold = ColdStarts(self.config.cold_models, self.config.cold_start_timeout)

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

    def serves(self, model: str) -> bool:
        """Whether an engine requests may go to now serves ``model``."""
        return any(b.up and model in b.models for b in self.engines.values())

    def pool_changed(self, now: float) -> None:
        """An engine was found, lost, went up or down or changed its models:
        what is held for a cold start is looked at again (``app.admission.cold``)."""
        for waiter in self.cold.pool_changed(now, self.serves, self.queue):
            # Its deadline moved: it takes its place in its tenant's order again.
            self.queue.remove(waiter)
            self.queue.add(waiter)

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

    def enqueue(self, waiter: Waiter, now: float, *, front: bool = False) -> list[PushedOut]:
        """Queue a request, or raise ``QueueFull`` if the queue is at its
        depth or its bytes and no one makes room for it (``queue_full``;
        ``app.admission.overflow``), or the predicted wait is longer than its
        objective allows (``objective_forecast``; not if it would be admitted
        at once). ``front``: a retry, which already waited its turn. Returns
        the waiters pushed out to make room, each with its Retry-After."""
        # (The config, not ``cold.holds``: no code of the cold-start module
        # on the path of a request for a model that is not cold.)
        config = self.config
        held = (
            config.cold_start_timeout > 0
            and waiter.model in config.cold_models
            and not self.serves(waiter.model)
        )
        if held:
            waiter.held_from = now
        pushed: list[PushedOut] = []
        if not front:
            pushed = self._refuse_if_full(waiter, now)
        if held:
            self.cold.hold(waiter, now)
        waiter.round = self._round
        waiter.sheddable = self.config.classes[waiter.priority].sheddable
        self.queue.add(waiter, front=front)
        self.forecast.drain.tick(now, backlog=True, in_flight=self.in_flight)
        return pushed

    def _refuse_if_full(self, waiter: Waiter, now: float) -> list[PushedOut]:
        config, w, forecast = self.config, waiter, self.forecast
        forecast.drain.tick(now, backlog=self.queued > 0, in_flight=self.in_flight)
        told = partial(forecast.retry_after, now, self.capacity_tokens, w.tokens, w.tenant)
        full = (
            self.queued >= config.max_queue_depth
            or self.queue.size + w.size > config.max_queue_bytes
        )
        # A full queue refuses what would wait in it, not what an engine
        # takes now (a depth of 0: no waiting at all, not no requests).
        out: list[Waiter] = []
        if full and not self._admitted_at_once(w, now):
            room = making_room(
                self.queue,
                w,
                depth_over=max(0, self.queued + 1 - config.max_queue_depth),
                bytes_over=max(0, self.queue.size + w.size - config.max_queue_bytes),
            )
            if room is None:
                raise QueueFull(told(w.priority))
            out = room
        wait = forecast.wait(w.priority, w.tokens, w.tenant, w.deadline)
        left = self.time_left(w, now)
        if wait is not None and forecast.misses(wait, left) and not self._admitted_at_once(w, now):
            raise QueueFull(
                told(w.priority, may_queue=True, objective=w.objective),
                reason="objective_forecast",
                message=(
                    f"the gateway's queue would not start this request within its objective"
                    f" of {w.objective:g}s"
                ),
            )
        # Pushed out only now that the arrival is queued in their place.
        pushed = []
        for victim in out:
            self.queue.remove(victim)
            retry = forecast.retry_after(
                now, self.capacity_tokens, victim.tokens, victim.tenant, victim.priority
            )
            pushed.append(PushedOut(victim, retry))
        return pushed

    def time_left(self, waiter: Waiter, now: float) -> float:
        """Seconds ``waiter`` may still wait and have its first token within
        its objective: its deadline, less the time a first token takes
        after admission (``first_token_lag``). Held for an engine to come
        up, its cold start's budget instead (``app.admission.cold``)."""
        if waiter.held_from is not None:
            return self.cold.time_left(waiter, now)
        return waiter.deadline - self.first_token_lag - now

    def first_token(self, seconds: float) -> None:
        """An admitted stream's first token came ``seconds`` after its admission."""
        if seconds >= 0:
            self.first_token_lag += _LAG_WEIGHT * (seconds - self.first_token_lag)

    def _admitted_at_once(self, waiter: Waiter, now: float) -> bool:
        """Nothing the order admits before it waits, and an engine has room
        for it now: it waits for nothing, whatever the drain rate says."""
        return self.queue.tokens_ahead(waiter.priority, waiter.tenant) == 0 and isinstance(
            self._place(waiter, now), tuple
        )

    def remove(self, waiter: Waiter) -> bool:
        """Take a waiter out (its client left, or its objective passed)."""
        return self.queue.remove(waiter)

    def drain_queue(self) -> list[Waiter]:
        """Empty the queue (shutdown); returns who was in it."""
        return self.queue.drain()

    def pop_admissible(self, now: float) -> tuple[list[tuple[Waiter, Reservation]], list[Waiter]]:
        """Admit waiters in order while the head of the order fits some
        engine. Waiters whose objective has passed are taken out instead
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
        makes it), and the waiters whose objective passed (taken out).
        ``passed``: the waiters this dispatch round found waiting for their
        prefix's engine (they hold their places; the next of their tenant's
        stand in for them), kept across the round's calls."""
        # The drain's clock up to now: what ``commit`` admits, it admits now.
        self.forecast.drain.tick(now, backlog=self.queued > 0, in_flight=self.in_flight)
        expired: list[Waiter] = []
        full_models: set[str] = set()
        passed = set() if passed is None else passed
        while (waiter := self.queue.head(skip=full_models, passed=passed)) is not None:
            if self.time_left(waiter, now) <= 0:
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
            if waiter.held_from is None:  # no one is stopped for an engine not up
                self._consider_eviction(waiter, now)
            full_models.add(waiter.model)
        # The end of a dispatch round. A waiter waiting for its prompt's
        # engine takes room elsewhere that no one behind it took, where
        # ``_may_take`` lets it: it waits while others can use that room,
        # never beside an idle engine.
        for waiter in sorted(passed, key=lambda w: (PRIORITIES.index(w.priority), w.arrival)):
            placed = self._place(waiter, now) if self.time_left(waiter, now) > 0 else None
            if placed is not None and not isinstance(placed, Wait) and self._may_take(placed[0]):
                passed.discard(waiter)
                budget, choice = placed
                return Decision(waiter, budget, choice, now), expired
        self.forecast.drain.tick(now, backlog=self.queued > 0, in_flight=self.in_flight)
        self._round += 1
        return None, expired

    def _consider_eviction(self, waiter: Waiter, now: float) -> None:
        """``waiter`` heads the order and fits nowhere: have a lower,
        sheddable request stopped for it if it would otherwise miss its
        objective (``app.admission.eviction``)."""
        lower = [r for r in self._sheddable_ranks if r > waiter.rank]
        if not lower or not any(b.live_by_rank[r] for b in self.engines.values() for r in lower):
            return
        left = self.time_left(waiter, now)
        eviction = self.evictor.consider(waiter, self.engines.values(), left, now)
        if eviction is not None:
            self._evictions.append(eviction)

    def take_evictions(self) -> list[Eviction]:
        """The evictions decided since the last call (the controller stops them)."""
        taken, self._evictions = self._evictions, []
        return taken

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

    def observe_engine(self, engine: str, reading: EngineReading) -> None:
        """One tick of an engine's facts (about once a second)."""
        self.engine(engine).observe(reading, self.queued > 0, self.overcommit_ceiling())

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
