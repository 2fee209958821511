"""Where the shared state lives in Redis, laid out for Redis Cluster.

A cluster keeps each key in one of 16,384 slots, chosen by the part of its
name in braces (its hash tag), and runs a script only on keys of one slot.
So what belongs together is tagged together:

- ``{gw}``: what is fleet-wide — the replicas' leases and the fair order
  (the tenants' clocks, who waits where). Every admission reads it.
- ``{gw:engine:<id>}``: one engine's budget — what each replica holds on
  it, their total, and the leases under which they hold it. One slot per
  engine: engines spread over a cluster's shards.
- ``{gw:key:<id>}``: one API key's limits (requests per window, token log,
  concurrent slots).

On one Redis the tags cost nothing, and an admission is one script over
``{gw}`` and its engine's slot. In a cluster it is two steps, one per slot
(``app.state.fleet``): the fair order is the fleet's, so ``{gw}`` stays one
shard's (docs/scale.md says what that costs).
"""

from app.request.identity import PRIORITIES

FLEET = "{gw}"
# The fair order's keys of one class, in the scripts' order.
CLASS_PARTS = ("waiting", "queuers", "queued", "fair")


def fleet(*parts: str) -> str:
    return ":".join((FLEET, *parts))


def fleet_state() -> list[str]:
    """The fleet-wide keys a script that knows the replicas' leases and the
    waiting tenants is given, in its order: the leases (live, lapsed), then
    per class, in priority order, who waits at each replica, how many
    replicas each tenant waits at, the waiting tenants by clock, the clocks."""
    keys = [fleet("alive"), fleet("lapsed")]
    for priority in PRIORITIES:
        keys += [fleet(part, priority) for part in CLASS_PARTS]
    return keys


def pool(tag: str, name: str) -> list[str]:
    """A pool's keys (what each replica holds of one thing, with the
    leases it holds it under), all in the slot of ``tag``."""
    base = f"{{gw:{tag}}}:{name}"
    return [base, f"{base}:leases", f"{base}:lapsed"]


def engine(engine_id: str) -> list[str]:
    """What the replicas hold on one engine: blocks, sequences, requests."""
    return pool(f"engine:{engine_id}", "held")


def slots(key: str) -> list[str]:
    """An API key's concurrent requests, per replica."""
    return pool(f"key:{key}", "slots")


def requests(key: str) -> str:
    """What names an API key's requests per window (``limits``' moving
    window, which puts its own prefix before it): in the key's slot."""
    return f"{{gw:key:{key}}}"


def tokens(key: str) -> list[str]:
    """An API key's token log (charge → time), charges (charge → tokens)
    and what its unsettled charges left unreserved (charge → tokens)."""
    base = f"{{gw:key:{key}}}"
    return [f"{base}:tokens", f"{base}:charges", f"{base}:unreserved"]
