"""Who makes room when the queue is full: no I/O, no clock.

A queue bounded in depth and bytes is shared by every tenant and class. Left
to arrival order, a flood fills it and every later arrival is refused
whoever sent it: a light tenant is turned away for a heavy one's backlog,
which the fair order inside the queue cannot undo. So a full queue drops
from the longest queue, not the arrival (longest-queue drop): the newest
waiter of the tenant queuing the most in the lowest class present gives its
place — any tenant's in a class below the arrival's, and in the arrival's
own class only a tenant that queues more than the arrival's would after the
swap. The arrival is refused itself when no one qualifies (its tenant is the
heaviest, or the queue holds only higher classes); nobody is pushed out
unless the arrival then fits. The one pushed out is refused as if it had
arrived to the full queue (``queue_full``), with its own ``Retry-After``.
"""

from collections.abc import Collection

from app.admission.fairqueue import FairQueue, Waiter
from app.request.identity import PRIORITIES


def making_room(
    queue: FairQueue, arrival: Waiter, *, depth_over: int, bytes_over: int
) -> list[Waiter] | None:
    """The waiters to push out so that ``arrival`` fits: at least
    ``depth_over`` of them and ``bytes_over`` bytes of body; None when that
    room cannot be made (``arrival`` is refused and nobody is pushed out)."""
    out: list[Waiter] = []
    freed_bytes = 0
    while len(out) < depth_over or freed_bytes < bytes_over:
        victim = _next_out(queue, arrival, out)
        if victim is None:
            return None
        out.append(victim)
        freed_bytes += victim.size
    return out


def _next_out(queue: FairQueue, arrival: Waiter, taken: Collection[Waiter]) -> Waiter | None:
    rank = PRIORITIES.index(arrival.priority)
    # The lowest class first, up to the arrival's own.
    for name in reversed(PRIORITIES[rank:]):
        left = {
            tenant: [w for w in waiters if w not in taken]
            for tenant, waiters in queue.queues_of(name).items()
        }
        own = len(left.get(arrival.tenant, ())) if name == arrival.priority else None
        for tenant in sorted(left, key=lambda t: len(left[t]), reverse=True):
            waiters = left[tenant]
            if not waiters:
                break
            if own is not None:
                if tenant == arrival.tenant:
                    continue
                # After the swap it must still queue no less than the arrival's tenant.
                if len(waiters) <= own + 1:
                    break
            return max(waiters, key=lambda w: w.arrival)
    return None
