"""What gateway replicas share about the engines: what each replica holds on
each engine (KV blocks, sequences, requests), and the tenants' fair-share
clocks. In Redis; admission (``app.admission.shared``) decides with it.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from app.request.identity import PRIORITIES
from app.state import hold_scripts, layout, scripts
from app.state.cluster_steps import ClusterSteps
from app.state.redis import SharedRedis

# What one replica holds on one engine: blocks, sequences, requests.
Holding = tuple[int, int, int]
# Heartbeats run every third of the lease: every third one sweeps.
SWEEP_EVERY = 3


@dataclass(frozen=True)
class Held:
    """The answer to a hold: whether it was made, and the fleet's totals on
    the engine before it (every live replica, this one included)."""

    ok: bool
    # Refused because another replica's waiting request goes first.
    not_my_turn: bool
    blocks: int
    sequences: int
    requests: int
    # The tenant's clock and the class's, after the charge (held only).
    served: float = 0.0
    vtime: float = 0.0
    # Refused because a tenant queued at this replica starts earlier on the
    # fleet's clock than the one asked for: the fleet's starts of both and of
    # every tenant queued here, for the replica to decide again with.
    starts: Mapping[str, float] | None = None


def _class_number(priority: str) -> int:
    """A priority class as the scripts number them (1: the highest)."""
    order: list[str] = list(PRIORITIES)
    return order.index(priority) + 1


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class FleetState:
    def __init__(self, shared: SharedRedis) -> None:
        self._shared = shared
        client = shared.client
        self._hold = client.register_script(hold_scripts.HOLD)
        self._release = client.register_script(scripts.RELEASE)
        self._beat = client.register_script(scripts.HEARTBEAT)
        # On a Redis Cluster, the hold and the heartbeat span slots: in steps.
        self._steps = ClusterSteps(shared) if shared.clustered else None
        self._publish = client.register_script(scripts.PUBLISH_WAITING)
        # What this replica gave back on each engine that is not in Redis
        # yet (its release waits in the writer's queue). A heartbeat writes
        # what the replica holds plus this: the release, applied after it,
        # takes it off once. Without it the release would come off twice —
        # the fleet would count less than the engines hold and over-admit.
        self._pending: dict[str, list[int]] = {}
        # Queued writes are dropped when Redis goes down: so is what they
        # would have given back (the next heartbeat writes the truth).
        self._epoch = 0
        # The engines where Redis may count something this replica holds
        # (a hold made there, a heartbeat that wrote it holding something):
        # the next heartbeat writes them, if only to say it holds nothing.
        # Kept while Redis is down: what it kept of them is written off then.
        self._in_pools: set[str] = set()
        self._beats = 0
        shared.on_change(self._dropped)

    def _dropped(self, up: bool) -> None:
        if not up:
            self._pending.clear()
            self._epoch += 1

    @property
    def up(self) -> bool:
        return self._shared.up

    @property
    def replicas(self) -> int:
        return self._shared.replicas

    @property
    def timeout(self) -> float:
        return self._shared.timeout

    async def hold(
        self,
        engine: str,
        want: Holding,
        limits: tuple[int | None, int],
        tenant: tuple[str, str, int],
        rivals: Iterable[str] = (),
    ) -> Held:
        """Hold ``want`` on ``engine`` if the fleet's holdings leave room
        within ``limits`` (budget blocks, sequence cap), charging ``tenant``
        (priority, tenant, tokens) on its class's clock. ``rivals``: the
        other tenants queued at this replica in that class."""
        shared = self._shared
        budget, cap = limits
        priority, name, tokens = tenant
        args: list[str | int] = [shared.replica, want[0], want[1]]
        args += [-1 if budget is None else budget, cap, shared.lease_ms, name, tokens]
        args += [_class_number(priority)]
        args += [rival for rival in rivals if rival != name]
        if self._steps is not None:
            answer = await self._steps.hold(engine, args)
        else:
            keys = layout.fleet_state() + layout.engine(engine)
            answer = await shared.call(lambda _: self._hold(keys=keys, args=args))
        ok, blocks, sequences, requests, served, vtime = answer[:6]
        if int(ok) == 1:
            self._in_pools.add(engine)
        fleet = (int(blocks), int(sequences), int(requests))
        starts = None
        if int(ok) == 3:
            pairs = answer[6:]
            starts = {_text(t): float(c) for t, c in zip(pairs[::2], pairs[1::2], strict=True)}
        return Held(
            int(ok) == 1,
            int(ok) == 2,
            *fleet,
            served=float(served),
            vtime=float(vtime),
            starts=starts,
        )

    def publish_waiting(self, waiting: Mapping[str, Sequence[str]]) -> None:
        """Tell the fleet which tenants wait at this replica in each class
        (none: nothing waits there); sent on, in order."""

        async def write(client: object) -> None:
            await self.publish(waiting)

        self._shared.send(write)

    async def publish(self, waiting: Mapping[str, Sequence[str]]) -> None:
        """``publish_waiting``, awaited."""
        shared = self._shared
        args: list[str | int] = [shared.replica, shared.lease_ms]
        for priority, tenants in waiting.items():
            # Tenant ids never hold a newline (app.request.identity).
            args += [_class_number(priority), "\n".join(tenants)]
        await self._publish(keys=layout.fleet_state(), args=args)

    def release(self, engine: str, holding: Holding) -> None:
        """Give back what a request held on ``engine``; sent on, in order."""
        shared = self._shared
        if not shared.up:
            return
        args: list[str | int] = [shared.replica, shared.lease_ms, *holding]
        pending = self._pending.setdefault(engine, [0, 0, 0])
        for i, amount in enumerate(holding):
            pending[i] += amount
        epoch = self._epoch

        async def write(client: object) -> None:
            try:
                await self._release(keys=layout.engine(engine), args=args)
            finally:
                if epoch == self._epoch:
                    for i, amount in enumerate(holding):
                        pending[i] -= amount

        shared.send(write)

    async def heartbeat(self, holdings: Mapping[str, Holding]) -> dict[str, Holding]:
        """Renew this replica's lease, write what it holds on each engine
        (and what it gave back there that Redis has not been told yet); the
        fleet's totals on each.

        Written are only the engines where the replica holds something, or
        where Redis may still count something of it (a hold made there since,
        or a heartbeat that wrote it holding something): on the others there
        is nothing to write, and the heartbeat only reads the total (once a
        lease, after taking out what lapsed replicas held there). So its
        writes grow with what the replica holds, not with the fleet's
        engines, and each engine it only reads costs one read."""
        shared = self._shared
        written: dict[str, list[int]] = {}
        read: list[str] = []
        for engine, held in holdings.items():
            pending = self._pending.get(engine, (0, 0, 0))
            truth = [h + gone for h, gone in zip(held, pending, strict=True)]
            if any(truth) or engine in self._in_pools:
                written[engine] = truth
            else:
                read.append(engine)
        engines = [*written, *read]
        # One heartbeat in SWEEP_EVERY (once a lease) also takes lapsed
        # replicas out of the engines it only reads: where no live replica
        # holds anything, nobody else would, and a dead one's part would
        # keep the engine looking full. The others read one key of each.
        self._beats += 1
        sweep = int(self._beats % SWEEP_EVERY == 0)
        if self._steps is not None:
            answer = await self._steps.heartbeat(written, read, bool(sweep))
        else:
            keys = layout.fleet_state() + [k for e in written for k in layout.engine(e)]
            keys += [k for e in read for k in (layout.engine(e) if sweep else layout.engine(e)[:1])]
            args: list[str | int] = [shared.replica, shared.lease_ms, sweep]
            for truth in written.values():
                args += truth
            answer = await self._beat(keys=keys, args=args)
        shared.replicas = max(1, int(answer[0]))
        for engine, truth in written.items():
            if any(truth):
                self._in_pools.add(engine)
            else:
                self._in_pools.discard(engine)
        totals = [int(x) for x in answer[1:]]
        return {
            e: (totals[3 * i], totals[3 * i + 1], totals[3 * i + 2]) for i, e in enumerate(engines)
        }

    async def clocks(
        self, queued: Mapping[str, Iterable[str]]
    ) -> dict[str, tuple[dict[str, float], float]]:
        """The fleet's clocks for the tenants queued here, per class."""
        client, out = self._shared.client, {}
        for priority, tenants in queued.items():
            names = list(tenants)
            values = await client.hmget(layout.fleet("fair", priority), ["", *names])
            vtime = float(values[0] or 0)
            served = {n: float(v) for n, v in zip(names, values[1:], strict=True) if v is not None}
            out[priority] = (served, vtime)
        return out

    def on_change(self, listener: Callable[[bool], None]) -> None:
        self._shared.on_change(listener)
