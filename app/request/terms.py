"""What the pipeline settles about a request before admission, that its
flight answers by (``app.request.flight``): whether its tokens are charged to a key,
the headers of a successful answer, and what follows from its outcome — each
run once, where the outcome is known, before it is counted and logged."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from app.request.record import RequestRecord

# Something that follows from a request's outcome, given its ended record.
EndListener = Callable[[RequestRecord], None]


@dataclass(frozen=True)
class AtEnd:
    """What follows from a request's outcome: run once when it ends, before
    it is counted and logged (so the log line has what they set), each
    skipped when not given."""

    # The key's charge settles to what the request used.
    settle_key: EndListener | None = None
    # The prompt-token estimate learns from the engine's count.
    learn_estimate: EndListener | None = None
    # A completed response's engine is remembered (continued responses go there).
    remember_response: EndListener | None = None


@dataclass(frozen=True)
class Terms:
    """What the pipeline settled before admission that the flight answers by."""

    # Its tokens are charged to a key: a stream cut short pays what the
    # engine says it generated (``app.relay.pick``).
    charged: bool = False
    # Sent with a successful answer only (the key's rate-limit headers).
    headers: Mapping[str, str] = field(default_factory=dict)
    at_end: AtEnd = AtEnd()
