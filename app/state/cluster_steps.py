"""The fleet's calls on a Redis Cluster, where a script touches the keys of
one slot only: the fleet's (``{gw}``: leases, the fair order) or one
engine's (``{gw:engine:<id>}``: what the replicas hold there).

- **A hold** is two steps: the turn and the tenant's charge in ``{gw}``
  (``hold_scripts.TURN``), then the room in the engine's slot (``PLACE``);
  refused there, the charge is undone (``UNCHARGE``), and the request goes
  back to the front of its queue with its tenant's clock as it was. Between
  the steps the tenant is charged for a request not yet held (the fair order
  sees it served a moment early); a Redis lost between them leaves the
  charge, the request being admitted then on this replica's share.
- **A heartbeat** is sent to every shard at once: the fleet's part, a
  script for each engine the replica writes, and a plain read of the total
  of each engine it only reads (one pipeline: a round trip per shard). The
  sweep that takes lapsed replicas out of engines nobody writes
  (``scripts.HEARTBEAT``'s, once a lease on one Redis) is a script per
  engine here, so each replica sweeps each such engine with a chance of one
  in the live replicas: about once a lease per engine over the fleet, not
  once per replica.
"""

import asyncio
import random
from collections.abc import Mapping, Sequence
from typing import Any

from app.state import hold_scripts, layout, scripts
from app.state.redis import SharedRedis


class ClusterSteps:
    def __init__(self, shared: SharedRedis) -> None:
        self._shared = shared
        client = shared.client
        self._turn = client.register_script(hold_scripts.TURN)
        self._place = client.register_script(hold_scripts.PLACE)
        self._uncharge = client.register_script(hold_scripts.UNCHARGE)
        self._fleet_beat = client.register_script(scripts.FLEET_BEAT)
        self._engine_beat = client.register_script(scripts.ENGINE_BEAT)

    async def hold(self, engine: str, args: list[str | int]) -> list[Any]:
        """``hold_scripts.HOLD``'s answer, in steps (``args``: its ARGV)."""
        shared = self._shared
        fleet = layout.fleet_state()
        turn = await shared.call(lambda _: self._turn(keys=fleet, args=args))
        if int(turn[0]) != 1:
            return list(turn)
        place = await shared.call(lambda _: self._place(keys=layout.engine(engine), args=args))
        served, start, vtime_before = turn[4:7]
        if int(place[0]) == 1:
            return [*place, served, start]
        back = [args[6], args[7], args[8], start, vtime_before]
        await shared.call(lambda _: self._uncharge(keys=fleet, args=back))
        return [*place, "0", "0"]

    async def heartbeat(
        self, written: Mapping[str, list[int]], read: Sequence[str], sweep: bool
    ) -> list[Any]:
        """``scripts.HEARTBEAT``'s answer: the live replicas, then the totals
        of the engines written, then of those read."""
        shared = self._shared
        base: list[str | int] = [shared.replica, shared.lease_ms]
        chance = 1 / max(1, shared.replicas)
        swept = {e for e in read if sweep and random.random() < chance}
        calls = [self._fleet_beat(keys=layout.fleet_state(), args=base)]
        for engine, truth in written.items():
            calls.append(self._engine_beat(keys=layout.engine(engine), args=[*base, 1, *truth]))
        for engine in swept:
            calls.append(self._engine_beat(keys=layout.engine(engine), args=[*base, 1]))
        plain = [e for e in read if e not in swept]
        # The scripts at once, each to its shard (redis-py's cluster pipeline
        # takes no scripts); the plain reads in one pipeline, a round trip
        # per shard.
        pipe = shared.client.pipeline(transaction=False)
        for engine in plain:
            pipe.hget(layout.engine(engine)[0], "")
        answers = await asyncio.gather(*calls, pipe.execute() if plain else _nothing())
        out: list[Any] = [answers[0]]
        totals = dict(zip([*written, *swept], answers[1:-1], strict=True))
        totals |= {e: _counts(a) for e, a in zip(plain, answers[-1], strict=True)}
        for engine in [*written, *read]:
            out += totals[engine]
        return out


async def _nothing() -> list[Any]:
    return []


def _counts(total: bytes | None) -> list[int]:
    """An engine's total as its pool keeps it (``"blocks sequences requests"``)."""
    values = [int(x) for x in (total or b"").split()]
    return values + [0] * (3 - len(values))
