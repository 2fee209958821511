"""How fast a queue drains, measured only while it is not empty."""


class DrainRate:
    """Tokens admitted per second out of a backlog, decayed over time."""

    HALF_LIFE = 30.0
    MIN_SECONDS = 2.0

    def __init__(self) -> None:
        self.tokens = 0.0
        self.seconds = 0.0
        self._backlog_since: float | None = None

    def tick(self, now: float, backlog: bool) -> None:
        """Call after every change, with whether requests are waiting now."""
        if self._backlog_since is not None:
            elapsed = max(0.0, now - self._backlog_since)
            decay = 0.5 ** (elapsed / self.HALF_LIFE)
            self.tokens *= decay
            self.seconds = self.seconds * decay + elapsed
        self._backlog_since = now if backlog else None

    def admitted(self, tokens: int) -> None:
        if self._backlog_since is not None:
            self.tokens += tokens

    def rate(self) -> float | None:
        if self.seconds < self.MIN_SECONDS or self.tokens <= 0:
            return None
        return self.tokens / self.seconds
