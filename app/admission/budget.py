"""One engine's KV budget: what it can hold, what is reserved on it, and how
far its reservations may overcommit it. No I/O, no clock.

The reasoning (demand, overcommit, the cap on one request's charge, the
fallback when the engine cannot be seen) is in ``app.admission.policy``;
this is its bookkeeping, once per engine, so engines of different sizes each
adapt to what they show.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass

from app.admission.fairqueue import Waiter
from app.admission.itl import InterTokenEstimate
from app.admission.overcommit import Overcommit
from app.admission.pace import Life, Open, PacedStarts, worst
from app.admission.recompute import EngineReading, RecomputeWindow
from app.admission.sequence_cap import LearnedCap
from app.engine.view import EngineView, FixedView, adapters_of
from app.relay.lane import StreamGauge
from app.request.errors import GatewayError
from app.request.identity import PRIORITIES
from app.routing.base import Choice, EngineLoad
from app.settings import default


@dataclass(frozen=True)
class BudgetConfig:
    # Sequences admitted at once to one engine (at most; see sequence_cap).
    max_sequences: int = default("max_concurrency")
    # Most of the budget (and of the sequence cap) one request is charged.
    max_request_share: float = default("max_request_share")
    # Count a prompt prefix that requests admitted here share once.
    prefix_aware: bool = default("prefix_aware_demand")
    # Sequences admitted at once while the KV capacity is unknown.
    unknown_capacity_sequences: int = default("fallback_max_sequences")
    # Pace starts where the KV cache binds (``app.admission.pace``).
    paced_starts: bool = default("paced_starts")
    # The engine orders by priority and preempts the least important first
    # when its blocks run out: a request is then held back only by the
    # blocks its own class and those above hold, not by lower classes'.
    by_priority: bool = False
    min_factor: float = 0.9
    max_factor: float = default("overcommit_max")
    initial_factor: float = default("overcommit_initial")
    # The share of what the engine generates it may compute again after
    # preemptions (an estimate, ``app.admission.recompute``); 0: none.
    preemption_budget: float = default("preemption_budget")
    backoff: float = 0.8
    step: float = 0.2
    headroom: float = 0.85
    patience: int = 2
    hold_after_backoff: int = 3


@dataclass(eq=False)
class Reservation:
    engine: str
    tokens: int
    blocks: int
    sequences: int = 1
    released: bool = False
    # The prompt prefix it holds on the engine (counted once there).
    prefix: tuple[int, ...] = ()
    # The LoRA adapter it asks for, if its model is one there.
    adapter: str | None = None
    # How the router placed it (metrics).
    choice: Choice | None = None
    # Its place among the engine's paced starts (``app.admission.pace``).
    paced: Open | None = None
    # When it was admitted (the policy's clock).
    admitted_at: float = 0.0
    # Its class's rank (0 first), and whether it may be stopped for a higher one.
    rank: int = 0
    sheddable: bool = False
    # Its most output (max_tokens times its sequences; 0: no bound).
    bound: int = 0
    # Its stream, once its engine answered (``app.admission.lane``): what
    # admission samples of it.
    stream: "StreamGauge | None" = None
    # What stops its request (its flight registers it; eviction calls it).
    stop: "Callable[[GatewayError], None] | None" = None
    evicted: bool = False


class EngineBudget:
    def __init__(self, engine: str, config: BudgetConfig, view: EngineView | None = None) -> None:
        self.id = engine
        self.config = config
        # Whether it is up and what it serves: read from the pool's view of
        # the engine, never copied (an engine not announced yet: nothing).
        self.view: EngineView = view or FixedView(engine)
        self.num_blocks: int | None = None
        self.block_size: int | None = None
        # The requests admitted here and not yet released, oldest first.
        self.live: dict[int, Reservation] = {}
        # What this gateway holds on the engine (and of it, by class rank)...
        self.reserved_blocks = 0
        self.reserved_by_rank = [0] * len(PRIORITIES)
        self.live_by_rank = [0] * len(PRIORITIES)
        self.in_flight = 0
        self.running_sequences = 0
        # ...and what other gateway replicas hold (shared state; 0 alone).
        self.others_blocks = 0
        self.others_sequences = 0
        self.others_in_flight = 0
        # The engine's own sequence cap (--max-num-seqs), once learned.
        self.learned_cap = LearnedCap(config.patience)
        # This replica's share of the engine when it cannot see what the
        # others hold (shared state down): 1 / replicas last seen alive.
        self.share = 1.0
        # Prompt-prefix pieces held by requests admitted here, with how
        # many hold each (the engine's prefix cache stores each once).
        self.prefixes: dict[int, int] = {}
        # LoRA adapters of the requests admitted here, with how many use
        # each: routing sees them before the engine's next report does.
        self.adapters: dict[str, int] = {}
        # How far its budget overcommits it (``app.admission.overcommit``).
        self.overcommit = Overcommit(config)
        self.pace = PacedStarts()
        # How fast it writes a running stream's tokens (``app.admission.itl``).
        self.itl = InterTokenEstimate()

    @property
    def up(self) -> bool:
        return self.view.routable

    @property
    def models(self) -> frozenset[str]:
        return self.view.models

    # --- capacity -----------------------------------------------------------

    def set_capacity(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks, self.block_size = num_blocks, block_size

    @property
    def capacity_tokens(self) -> int | None:
        if self.num_blocks is None or self.block_size is None:
            return None
        return self.num_blocks * self.block_size

    @property
    def usable_blocks(self) -> int | None:
        """What the engine's requests can hold: vLLM keeps one block of its
        cache for itself (the block pool's null block)."""
        if self.num_blocks is None:
            return None
        return max(1, self.num_blocks - 1)

    @property
    def budget_blocks(self) -> int | None:
        usable = self.usable_blocks
        if usable is None:
            return None
        return math.floor(usable * self.factor * self.share)

    @property
    def sequence_cap(self) -> int | None:
        return self.learned_cap.value

    @sequence_cap.setter
    def sequence_cap(self, value: int | None) -> None:
        self.learned_cap.value = value

    @property
    def engine_cap(self) -> int:
        """The sequences the engine runs at once, as far as admission knows."""
        cap = self.config.max_sequences
        if self.sequence_cap is not None:
            cap = min(cap, self.sequence_cap)
        if self.budget_blocks is None:
            cap = min(cap, self.config.unknown_capacity_sequences)
        return cap

    @property
    def max_sequences(self) -> int:
        """Sequences admitted here at once: the engine's cap, this replica's share."""
        return max(1, math.floor(self.engine_cap * self.share))

    def holding(self) -> tuple[int, int, int]:
        """What this replica holds here: blocks, sequences, requests."""
        return self.reserved_blocks, self.running_sequences, self.in_flight

    # --- reservations ---------------------------------------------------------

    def charged(self, waiter: Waiter) -> tuple[int, int]:
        """(blocks, sequences) ``waiter`` is charged here: its demand, capped
        at ``max_request_share`` of the budget and of the sequence cap."""
        share = self.config.max_request_share
        sequences = min(waiter.sequences, max(1, math.floor(share * self.max_sequences)))
        block_size = self.block_size or 1
        blocks = max(1, waiter.blocks(block_size) - self.shared_blocks(waiter, block_size))
        budget = self.budget_blocks
        if budget is not None:
            blocks = min(blocks, max(1, math.floor(share * budget)))
        return blocks, sequences

    def shared_blocks(self, waiter: Waiter, block_size: int) -> int:
        """Whole KV blocks of ``waiter``'s prompt that requests admitted here
        already hold: the longest run of its leading prefix pieces present,
        in tokens (estimated from the text), in whole blocks (vLLM shares
        only full blocks)."""
        if not self.config.prefix_aware or not waiter.prefix:
            return 0
        shared_tokens = 0
        for piece, tokens in waiter.prefix:
            if piece not in self.prefixes:
                break
            shared_tokens = tokens
        return shared_tokens // block_size

    def fits(self, waiter: Waiter, now: float) -> bool:
        if self.in_flight + self.others_in_flight == 0:
            return True
        blocks, sequences = self.charged(waiter)
        if self.running_sequences + self.others_sequences + sequences > self.max_sequences:
            return False
        budget = self.budget_blocks
        if budget is None:
            return True
        lives = waiter.lives()
        if self.paces(lives, budget) and not self.outranks_live(waiter):
            paced = self.pace.fits(lives, budget, self.block_size or 1, now)
            if paced is not None:
                return paced
        return self.holding_for(waiter) + self.others_blocks + blocks <= budget

    def fits_without(self, waiter: Waiter, freed: Reservation, now: float) -> bool:
        """Whether ``waiter`` would fit here once ``freed`` (one of the
        requests admitted here) gave its room back (``app.admission.eviction``)."""
        if self.in_flight + self.others_in_flight <= 1:
            return True
        blocks, sequences = self.charged(waiter)
        slots = freed.sequences
        if self.running_sequences + self.others_sequences - slots + sequences > self.max_sequences:
            return False
        budget = self.budget_blocks
        if budget is None:
            return True
        held = self.holding_for(waiter)
        if not self.config.by_priority or freed.rank <= waiter.rank:
            held -= freed.blocks
        return held + self.others_blocks + blocks <= budget

    def holding_for(self, waiter: Waiter) -> int:
        """The blocks held here that stand in ``waiter``'s way: all of them,
        or where the engine orders by priority, those of its class and the
        classes above (the engine preempts the others to make room)."""
        if not self.config.by_priority:
            return self.reserved_blocks
        return sum(self.reserved_by_rank[: waiter.rank + 1])

    def outranks_live(self, waiter: Waiter) -> bool:
        """Where the engine orders by priority, whether requests of a lower
        class than ``waiter``'s run here: the engine preempts them to make
        room for it, so the pace that spreads their lives does not hold it
        back (only what its class and those above hold does)."""
        return self.config.by_priority and any(self.live_by_rank[waiter.rank + 1 :])

    def paces(self, lives: tuple[Life, ...], budget: int) -> bool:
        """Whether requests of ``lives`` start paced here: the cache, not
        the sequence cap, bounds how many run (``app.admission.pace``).
        Not while other replicas hold on the engine: their starts are
        not seen here."""
        block = self.block_size
        if not lives or block is None or not self.config.paced_starts or self.others_in_flight:
            return False
        return budget // max(worst(life, block) for life in lives) < self.engine_cap

    def reserve(self, waiter: Waiter, now: float) -> Reservation:
        blocks, sequences = self.charged(waiter)
        self.in_flight += 1
        self.running_sequences += sequences
        self.reserved_blocks += blocks
        self.reserved_by_rank[waiter.rank] += blocks
        pieces = tuple(piece for piece, _ in waiter.prefix) if self.config.prefix_aware else ()
        for piece in pieces:
            self.prefixes[piece] = self.prefixes.get(piece, 0) + 1
        adapter = waiter.model if waiter.model in self.view.adapters else None
        if adapter is not None:
            self.adapters[adapter] = self.adapters.get(adapter, 0) + 1
        reservation = Reservation(
            self.id,
            waiter.tokens,
            blocks,
            sequences,
            prefix=pieces,
            adapter=adapter,
            admitted_at=now,
            rank=waiter.rank,
            sheddable=waiter.sheddable,
            bound=waiter.output * waiter.sequences,
        )
        self.live[id(reservation)] = reservation
        self.live_by_rank[reservation.rank] += 1
        budget, lives = self.budget_blocks, waiter.lives()
        if budget is not None and self.paces(lives, budget):
            reservation.paced = Open(lives, now)
            self.pace.started(reservation.paced, budget, self.block_size or 1)
        return reservation

    def release(self, reservation: Reservation) -> None:
        if self.live.pop(id(reservation), None) is not None:
            self.live_by_rank[reservation.rank] -= 1
        self.in_flight -= 1
        if reservation.paced is not None:
            self.pace.ended(reservation.paced)
        self.running_sequences -= reservation.sequences
        self.reserved_blocks -= reservation.blocks
        self.reserved_by_rank[reservation.rank] -= reservation.blocks
        for piece in reservation.prefix:
            held = self.prefixes.get(piece, 0) - 1
            if held > 0:
                self.prefixes[piece] = held
            else:
                self.prefixes.pop(piece, None)
        adapter = reservation.adapter
        if adapter is not None:
            if self.adapters.get(adapter, 0) > 1:
                self.adapters[adapter] -= 1
            else:
                self.adapters.pop(adapter, None)

    def load(self, waiter: Waiter, now: float) -> EngineLoad:
        """What the router sees of this engine, for ``waiter`` at ``now``."""
        budget = self.budget_blocks or 0
        held = self.reserved_blocks + self.others_blocks
        return EngineLoad(
            id=self.id,
            in_flight=self.in_flight + self.others_in_flight,
            weight=float(budget or self.max_sequences),
            reserved=held / budget if budget else 0.0,
            fits=self.fits(waiter, now),
            up=self.up,
            models=self.models,
            adapters=adapters_of(self.view, self.adapters),
        )

    # --- adapting to the engine -------------------------------------------------

    @property
    def factor(self) -> float:
        return self.overcommit.factor

    @property
    def recompute(self) -> RecomputeWindow:
        """What preemption costs the engine (``app.admission.recompute``)."""
        return self.overcommit.window

    def hold_at_floor(self) -> None:
        self.overcommit.hold_at_floor()

    def observe(self, reading: EngineReading, queued: bool, ceiling: float) -> None:
        """One tick of the engine's facts: the overcommit adapts."""
        self.overcommit.observe(reading, queued, ceiling)

    def observe_queue(self, running: float, waiting: float, kv_usage: float) -> None:
        """Learn the engine's own sequence cap (``app.admission.sequence_cap``)."""
        # Not right after a preemption: preempted requests wait too.
        self.learned_cap.observe(
            running,
            waiting,
            ours=max(
                self.running_sequences + self.others_sequences,
                self.in_flight + self.others_in_flight,
            ),
            room=kv_usage < self.config.headroom,
            calm=self.overcommit.calm,
        )
