"""The one lane between a request in flight and admission.

What a running request tells admission — its engine answered (``opened``),
how far its stream has come (its ``StreamGauge``, read whenever admission
wants it: nothing is pushed per event), that its stream completed
(``ended``) — and the one thing admission may ask of it: to stop
(``on_evict``: a sheddable request stopped for a higher class). The hold's
``release`` (``app.admission.base``) gives the capacity back. Admission owns
what follows from each (``app.admission.lane``); the relay's hot loop only
counts what it sends.
"""

from collections.abc import Callable
from typing import Protocol

from app.request.errors import GatewayError


class StreamGauge(Protocol):
    """What a running stream shows, read when sampled."""

    @property
    def events(self) -> int:
        """Content events sent from the first token on."""

    @property
    def counted_tokens(self) -> float | None:
        """The tokens the engine said it had generated, where its chunks
        say (None: they do not)."""

    @property
    def first_token_at(self) -> float | None:
        """When its first token went out (``time.perf_counter``)."""


class Lane(Protocol):
    def opened(self, gauge: StreamGauge | None) -> None:
        """The engine answered the call; ``gauge``: the stream's, None for a
        whole answer."""

    def ended(self, tokens: int, events: int, seconds: float) -> None:
        """The stream completed: ``tokens`` of output in ``events`` events,
        ``seconds`` from its first token to its last."""

    def on_evict(self, stop: Callable[[GatewayError], None]) -> None:
        """Admission may stop the request: ``stop`` ends it with the error."""


class NoLane:
    """A hold nothing follows (admission off)."""

    def opened(self, gauge: StreamGauge | None) -> None:
        return None

    def ended(self, tokens: int, events: int, seconds: float) -> None:
        return None

    def on_evict(self, stop: Callable[[GatewayError], None]) -> None:
        return None
