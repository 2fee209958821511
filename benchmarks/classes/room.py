"""Was a refusal needed? A refusal is flagged when, by the engine's own
figures sampled each second, it had room at that moment: fewer sequences
running than it may run, and its KV cache under 90% in use. A gateway
that refuses while the engine has room turned away work the engine would
have started at once (it may still have been right: the request's
objective may have been out of reach behind what was queued; the flag says
where to look, not that it was wrong).

Pure: states are (seconds after the start, running, KV share in use)."""

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

KV_ROOM = 0.9
State = tuple[float, float, float]


def state_at(states: Sequence[State], at: float) -> State | None:
    """The last state sampled at or before ``at`` (the first one, when
    ``at`` comes before every sample; None without samples)."""
    if not states:
        return None
    i = bisect_right([s[0] for s in states], at)
    return states[max(0, i - 1)]


def had_room(state: State, max_num_seqs: int, kv_room: float = KV_ROOM) -> bool:
    _, running, kv = state
    return running < max_num_seqs and kv < kv_room


@dataclass
class Refusals:
    count: int
    with_room: int
    # Seconds after the start of the first and the last refusal.
    first_s: float | None
    last_s: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def refusals(times: Sequence[float], states: Sequence[State], max_num_seqs: int) -> Refusals:
    """The refusals at ``times`` (seconds after the start), and how many
    came while the engine had room."""
    room = 0
    for at in times:
        state = state_at(states, at)
        room += state is not None and had_room(state, max_num_seqs)
    return Refusals(
        count=len(times),
        with_room=room,
        first_s=min(times) if times else None,
        last_s=max(times) if times else None,
    )
