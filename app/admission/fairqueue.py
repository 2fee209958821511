"""The waiting requests, in the order admission serves them: no I/O, no clock.

Priority class first (high, normal, low); within a class, start-time fair
queuing between tenants — the tenant that has been admitted the fewest
tokens goes next, and a tenant that starts waiting again starts at the
class's virtual time, so idle time is not banked as credit; within a tenant,
earliest deadline first (a request's deadline is its arrival plus its own
objective: with equal objectives, arrival order). A waiter holds its place
until admitted, removed (its client left, its objective passed) or drained.
"""

import math
from collections import deque
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from app.admission.pace import Life
from app.request.identity import PRIORITIES
from app.routing.block_index import PromptBlocks


@dataclass(eq=False)
class Waiter:
    """A request waiting for admission (or about to be admitted)."""

    tenant: str
    priority: str
    tokens: int
    arrival: float
    # When its objective would be missed: its arrival at the gateway plus
    # its objective (seconds from arrival to its first token).
    deadline: float = math.inf
    objective: float = math.inf
    # Sequences the engine runs for it (prompts of a batch × n), and the
    # prompt + output tokens of each (empty: ``tokens`` split evenly).
    sequences: int = 1
    seq_tokens: tuple[int, ...] = ()
    # Its max_tokens (0: not given): the most output each sequence writes.
    output: int = 0
    # The model it asks for (only engines that serve it may take it), the
    # engines it must not go to (a retry), its prompt's prefix key.
    model: str = ""
    excluded: frozenset[str] = frozenset()
    affinity: int | None = None
    # The one engine it may go to (a continued response lives there).
    pinned: str | None = None
    # Its prompt's prefix pieces (chained hashes) with the tokens up to the
    # end of each, estimated: what an engine may already hold of it.
    prefix: tuple[tuple[int, int], ...] = ()
    # Its prompt's token ids and salt, when known (routing looks them up in
    # what the engines report holding).
    prompt: PromptBlocks | None = None
    # The size of its body, which it holds while it waits.
    size: int = 0
    # The dispatch round it was queued in: only requests that waited past
    # their first round count towards the drain rate.
    round: int = 0
    # The engine it waited for, holding its place, because that engine
    # holds the most of its prompt (``app.routing.prefix``).
    waited_for: str | None = None
    # Its class may be stopped for a higher one (``app.admission.classes``).
    sheddable: bool = False
    # It had a sheddable request stopped to make room for it (once at most).
    evicted_for: bool = False
    # Since when it has been held for an engine to come up for its model
    # (scale from zero: ``app.admission.cold``); None: not held.
    held_from: float | None = None

    @property
    def rank(self) -> int:
        """Its class's place in the order (0 first)."""
        return PRIORITIES.index(self.priority)

    def lives(self) -> tuple[Life, ...]:
        """Each sequence's prompt and most output (none without ``output``)."""
        output = self.output
        if not output:
            return ()
        if self.seq_tokens:
            return tuple(Life(max(0, t - output), output) for t in self.seq_tokens)
        per = self.tokens // max(1, self.sequences)
        return tuple(Life(max(0, per - output), output) for _ in range(self.sequences))

    def blocks(self, block_size: int) -> int:
        """Its worst case in KV blocks of ``block_size`` tokens."""
        if self.seq_tokens:
            return sum(math.ceil(t / block_size) for t in self.seq_tokens)
        per_sequence = self.tokens / self.sequences
        return math.ceil(per_sequence / block_size) * self.sequences


@dataclass
class _Class:
    queues: dict[str, deque[Waiter]] = field(default_factory=dict)
    served: dict[str, float] = field(default_factory=dict)
    vtime: float = 0.0
    tokens: int = 0
    size: int = 0
    count: int = 0


class FairQueue:
    def __init__(self) -> None:
        self._classes: dict[str, _Class] = {name: _Class() for name in PRIORITIES}

    # --- size ---------------------------------------------------------------

    def __len__(self) -> int:
        return sum(cls.count for cls in self._classes.values())

    @property
    def size(self) -> int:
        """Bytes of body the waiters hold."""
        return sum(cls.size for cls in self._classes.values())

    def depth_by_priority(self) -> dict[str, int]:
        return {name: cls.count for name, cls in self._classes.items()}

    def depth_by_tenant(self) -> dict[str, int]:
        depth: dict[str, int] = {}
        for cls in self._classes.values():
            for tenant, queue in cls.queues.items():
                depth[tenant] = depth.get(tenant, 0) + len(queue)
        return depth

    def tokens_up_to(self, priority: str) -> int:
        """Tokens waiting at ``priority`` or above."""
        ahead = 0
        for name in PRIORITIES:
            ahead += self._classes[name].tokens
            if name == priority:
                break
        return ahead

    def tokens_ahead(self, priority: str, tenant: str | None, deadline: float = math.inf) -> int:
        """Tokens the order admits before a new request of ``tenant`` at
        ``priority`` due at ``deadline``: every class above, its tenant's own
        queued requests due no later, and of each other tenant's those that
        start (in tokens admitted) before it would. A tenant that has been
        served little goes ahead of most of a heavy tenant's backlog: its
        wait is not the whole queue's. ``tenant`` None: everything at
        ``priority`` or above."""
        if tenant is None:
            return self.tokens_up_to(priority)
        ahead = 0
        for name in PRIORITIES:
            cls = self._classes[name]
            if name != priority:
                ahead += cls.tokens
                continue
            own = sum(w.tokens for w in cls.queues.get(tenant, ()) if w.deadline <= deadline)
            start = max(cls.served.get(tenant, 0.0), cls.vtime) + own
            ahead += own
            for other, queue in cls.queues.items():
                if other == tenant:
                    continue
                clock = cls.served[other]
                for waiter in queue:
                    if clock > start:
                        break
                    ahead += waiter.tokens
                    clock += waiter.tokens
            return ahead
        return ahead

    def ahead_of(self, waiter: Waiter) -> tuple[int, int]:
        """Requests and tokens the order admits before a queued ``waiter``:
        every class above, its tenant's requests queued before it, and of
        each other tenant's those that start (in tokens admitted, then by
        arrival) before it."""
        count = tokens = 0
        for name in PRIORITIES:
            cls = self._classes[name]
            if name != waiter.priority:
                count, tokens = count + cls.count, tokens + cls.tokens
                continue
            start = cls.served.get(waiter.tenant, cls.vtime)
            for own in cls.queues.get(waiter.tenant, ()):
                if own is waiter:
                    break
                count, tokens, start = count + 1, tokens + own.tokens, start + own.tokens
            for other, queue in cls.queues.items():
                if other == waiter.tenant:
                    continue
                clock = cls.served[other]
                for before in queue:
                    if (clock, before.arrival) >= (start, waiter.arrival):
                        break
                    count, tokens, clock = count + 1, tokens + before.tokens, clock + before.tokens
            break
        return count, tokens

    @property
    def tokens(self) -> int:
        return sum(cls.tokens for cls in self._classes.values())

    def queues_of(self, priority: str) -> Mapping[str, Sequence[Waiter]]:
        """Each tenant's waiters in ``priority``, in its order (not to be changed)."""
        return self._classes[priority].queues

    # --- changes --------------------------------------------------------------

    def add(self, waiter: Waiter, *, front: bool = False) -> None:
        cls = self._classes[waiter.priority]
        queue = cls.queues.get(waiter.tenant)
        if not queue:
            # A tenant that starts waiting again starts at the class's
            # virtual time: idle time is not saved up as credit.
            cls.served[waiter.tenant] = max(cls.served.get(waiter.tenant, 0.0), cls.vtime)
            queue = cls.queues[waiter.tenant] = deque()
        if front:
            queue.appendleft(waiter)
        else:
            # After every waiter due no later: equal deadlines keep arrival order.
            at = len(queue)
            while at > 0 and queue[at - 1].deadline > waiter.deadline:
                at -= 1
            queue.insert(at, waiter)
        self._count(cls, waiter, 1)

    def remove(self, waiter: Waiter) -> bool:
        """Take a waiter out; False if it was not queued."""
        cls = self._classes[waiter.priority]
        queue = cls.queues.get(waiter.tenant)
        if not queue or waiter not in queue:
            return False
        queue.remove(waiter)
        if not queue:
            del cls.queues[waiter.tenant]
        self._count(cls, waiter, -1)
        return True

    def admit(self, waiter: Waiter) -> None:
        """Take ``waiter`` out as admitted — its tenant's first, or the first
        after some that ``head`` passed over — and charge its tenant."""
        cls = self._classes[waiter.priority]
        queue = cls.queues[waiter.tenant]
        if queue[0] is waiter:
            queue.popleft()
        else:
            queue.remove(waiter)
        if not queue:
            del cls.queues[waiter.tenant]
        self._count(cls, waiter, -1)
        cls.vtime = max(cls.vtime, cls.served[waiter.tenant])
        cls.served[waiter.tenant] += waiter.tokens
        # Tenants with nothing queued and no lead over the clock are
        # forgotten: they would start at the clock anyway.
        for tenant in [t for t, s in cls.served.items() if t not in cls.queues and s <= cls.vtime]:
            del cls.served[tenant]

    def drain(self) -> list[Waiter]:
        """Empty the queue (shutdown); returns who was in it."""
        everyone = list(self)
        for waiter in everyone:
            self.remove(waiter)
        return everyone

    # --- shared clocks (several replicas) --------------------------------------

    def queued_tenants(self) -> dict[str, list[str]]:
        return {name: list(cls.queues) for name, cls in self._classes.items() if cls.queues}

    def sync_clocks(self, priority: str, served: dict[str, float], vtime: float) -> None:
        """Take the fleet's clocks where they are ahead of this replica's:
        the tenants' tokens admitted by every replica decide the order."""
        cls = self._classes[priority]
        cls.vtime = max(cls.vtime, vtime)
        for tenant, clock in served.items():
            if tenant in cls.served:
                cls.served[tenant] = max(cls.served[tenant], clock)

    def set_starts(self, priority: str, starts: Mapping[str, float], vtime: float) -> None:
        """Take the fleet's clocks as they are for the tenants queued here
        (the fleet found one of them starting earlier than this replica's
        copy said): the order here then agrees with the fleet's."""
        cls = self._classes[priority]
        cls.vtime = max(cls.vtime, vtime)
        for tenant, start in starts.items():
            if tenant in cls.queues:
                cls.served[tenant] = start

    # --- order --------------------------------------------------------------

    def head(
        self,
        skip: set[str] | frozenset[str] = frozenset(),
        passed: Collection[Waiter] = (),
    ) -> Waiter | None:
        """The next waiter in order, passing over tenants whose first waiter
        asks for a model in ``skip`` (one that cannot be placed now), and over
        the waiters in ``passed`` (each holding its place while it waits for
        one engine: the next of its tenant's stands in for it)."""
        for name in PRIORITIES:
            cls = self._classes[name]
            firsts = {t: _first(q, passed) for t, q in cls.queues.items()}
            candidates = [t for t, w in firsts.items() if w is not None and w.model not in skip]
            if candidates:
                tenant = min(candidates, key=lambda t: (cls.served[t], cls.queues[t][0].arrival))
                return firsts[tenant]
        return None

    def __iter__(self) -> Iterator[Waiter]:
        for cls in self._classes.values():
            for queue in cls.queues.values():
                yield from queue

    @staticmethod
    def _count(cls: _Class, waiter: Waiter, sign: int) -> None:
        cls.count += sign
        cls.tokens += sign * waiter.tokens
        cls.size += sign * waiter.size


def _first(queue: deque[Waiter], passed: Collection[Waiter]) -> Waiter | None:
    if not passed:
        return queue[0]
    return next((w for w in queue if w not in passed), None)
