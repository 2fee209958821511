"""How fast an engine writes a running stream's tokens: seconds per token,
learned from its completed streams. No I/O, no clock.

A stream's first token says how long its prompt took; the tokens after it
come one engine step apart, so a completed stream's span from its first
token to its last, over the tokens after the first, is the engine's step as
that stream saw it. A running mean of those spans says when a running
stream with so many tokens left will end (``app.admission.eviction``), and
an operator reads it on ``/status``.
"""

# The weight of a completed stream in the running mean.
WEIGHT = 0.1


class InterTokenEstimate:
    def __init__(self) -> None:
        # None until a stream of more than one token has completed.
        self.seconds_per_token: float | None = None

    def learn(self, tokens: int, seconds: float) -> None:
        """A stream completed: ``tokens`` of output, ``seconds`` from its
        first token to its last."""
        if tokens < 2 or seconds <= 0:
            return
        step = seconds / (tokens - 1)
        known = self.seconds_per_token
        self.seconds_per_token = step if known is None else known + WEIGHT * (step - known)

    def time_for(self, tokens: float) -> float | None:
        """Seconds the engine takes to write ``tokens`` more (None: not learned)."""
        known = self.seconds_per_token
        return None if known is None else max(0.0, tokens) * known
