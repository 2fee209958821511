"""How an engine writes a running stream: seconds per token, and tokens per
stream event, learned from its completed streams. No I/O, no clock.

A stream's first token says how long its prompt took; the tokens after it
come one engine step apart, so a completed stream's span from its first
token to its last, over the tokens after the first, is the engine's step as
that stream saw it. Under load the engine puts several tokens in one event
(it writes them faster than its API server sends them), so a running
stream's events undercount what it has written: a completed stream's tokens
over its events say by how much. Running means of both say when a running
stream with so many tokens left will end (``app.admission.eviction``) and
where a paced start stands (``app.admission.pace``); an operator reads them
on ``/status``.
"""

from app.relay.lane import StreamGauge

# The weight of a completed stream in the running means (after the first
# streams, whose plain mean counts).
WEIGHT = 0.1


class InterTokenEstimate:
    def __init__(self) -> None:
        # None until a stream of more than one token has completed.
        self.seconds_per_token: float | None = None
        self.tokens_per_event = 1.0
        self._streams = 0

    def learn(self, tokens: int, events: int, seconds: float) -> None:
        """A stream completed: ``tokens`` of output in ``events`` events,
        ``seconds`` from its first token to its last."""
        if events > 0 and tokens >= events:
            # The plain mean of the first streams, a running mean after.
            self._streams += 1
            weight = max(WEIGHT, 1.0 / self._streams)
            self.tokens_per_event += weight * (tokens / events - self.tokens_per_event)
        if tokens < 2 or seconds <= 0:
            return
        step = seconds / (tokens - 1)
        known = self.seconds_per_token
        self.seconds_per_token = step if known is None else known + WEIGHT * (step - known)

    def time_for(self, tokens: float) -> float | None:
        """Seconds the engine takes to write ``tokens`` more (None: not learned)."""
        known = self.seconds_per_token
        return None if known is None else max(0.0, tokens) * known

    def tokens_sent(self, gauge: StreamGauge) -> float:
        """A running stream's tokens so far: what its engine said, or its
        events, each counted as what the engine's streams carried an event."""
        counted = gauge.counted_tokens
        return counted if counted is not None else gauge.events * max(1.0, self.tokens_per_event)
