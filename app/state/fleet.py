"""What gateway replicas share about the engines: what each replica holds on
each engine (KV blocks, sequences, requests), and the tenants' fair-share
clocks. In Redis; admission (``app.admission.shared``) decides with it.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from app.identity import PRIORITIES
from app.state import scripts
from app.state.redis import SharedRedis

# What one replica holds on one engine: blocks, sequences, requests.
Holding = tuple[int, int, int]


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


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class FleetState:
    def __init__(self, shared: SharedRedis) -> None:
        self._shared = shared
        self._hold = shared.client.register_script(scripts.HOLD)
        self._beat = shared.client.register_script(scripts.HEARTBEAT)

    @property
    def up(self) -> bool:
        return self._shared.up

    @property
    def replicas(self) -> int:
        return self._shared.replicas

    @property
    def timeout(self) -> float:
        return self._shared.timeout

    def _keys(self, engine: str) -> list[str]:
        key = self._shared.key
        return [key("blocks", engine), key("sequences", engine), key("requests", engine)]

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
        order: list[str] = list(PRIORITIES)
        higher = order[: order.index(priority)]
        keys = [shared.key("alive"), *self._keys(engine), shared.key("fair", priority)]
        keys += [shared.key("waiting", c) for c in (priority, *higher)]
        args: list[str | int] = [shared.replica, want[0], want[1]]
        args += [-1 if budget is None else budget, cap, shared.lease_ms, name, tokens]
        args += [rival for rival in rivals if rival != name]
        answer = await shared.call(lambda _: self._hold(keys=keys, args=args))
        ok, blocks, sequences, requests, served, vtime = answer[:6]
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
        (none: nothing waits there)."""
        shared = self._shared

        async def write(client: object) -> None:
            pipe = shared.client.pipeline(transaction=False)
            for priority, tenants in waiting.items():
                key = shared.key("waiting", priority)
                if tenants:
                    # Tenant ids never hold a newline (app.identity).
                    pipe.hset(key, shared.replica, "\n".join(tenants))
                else:
                    pipe.hdel(key, shared.replica)
            await pipe.execute()

        shared.send(write)

    def release(self, engine: str, holding: Holding) -> None:
        replica = self._shared.replica
        keys = self._keys(engine)

        async def write(client: object) -> None:
            pipe = self._shared.client.pipeline(transaction=False)
            for key, amount in zip(keys, holding, strict=True):
                pipe.hincrby(key, replica, -amount)
            await pipe.execute()

        self._shared.send(write)

    async def heartbeat(self, holdings: dict[str, Holding]) -> dict[str, Holding]:
        """Write what this replica holds on each engine; the fleet's totals."""
        shared = self._shared
        engines = list(holdings)
        keys = [shared.key("alive")] + [k for e in engines for k in self._keys(e)]
        args: list[str | int] = [shared.replica, shared.lease_ms]
        args += [amount for e in engines for amount in holdings[e]]
        answer = await self._beat(keys=keys, args=args)
        shared.replicas = max(1, int(answer[0]))
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
            values = await client.hmget(self._shared.key("fair", priority), ["", *names])
            vtime = float(values[0] or 0)
            served = {n: float(v) for n, v in zip(names, values[1:], strict=True) if v is not None}
            out[priority] = (served, vtime)
        return out

    def on_change(self, listener: Callable[[bool], None]) -> None:
        self._shared.on_change(listener)
