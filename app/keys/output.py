"""How much of its output allowance a key's requests write, learned from
the ones that completed: the estimate a token reservation starts from.

A request may write up to ``max_tokens`` (or the rest of the context) per
sequence; most stop well before. Per key, the share of the allowance that
completed requests wrote (their ``completion_tokens`` over the most they
could have written) is averaged, recent requests weighing more, so the
estimate follows a key whose clients change what they ask. Per key, not
for the gateway: a key's clients have their own habits (one key's batch
summaries write their whole allowance, another's chat stops after a line),
and a gateway-wide share would let one key's short answers set another
key's reservations. What the estimate is wrong by never breaks the limit
(``app.keys.quota``): it only decides how much of the room is used.

Until a key has ``MIN_SAMPLES`` completed requests its estimate is the worst
case, what the limit reserved before it learned anything. Cancelled and
failed requests do not teach it: they stopped for reasons that say nothing
about what the next request will write.
"""

import math
from dataclasses import dataclass

# Completed requests a key needs before its estimate is below the worst case.
MIN_SAMPLES = 4
# Each completed request weighs this much less than the next (a half-life
# of about 20 requests).
DECAY = 0.966


@dataclass
class OutputShare:
    """The share of their allowance a key's completed requests wrote,
    decayed."""

    written: float = 0.0
    weight: float = 0.0
    count: int = 0

    def observe(self, written: int, most: int) -> None:
        if most <= 0:
            return  # nothing could be written (an embedding): nothing to learn
        self.written = self.written * DECAY + min(1.0, max(0, written) / most)
        self.weight = self.weight * DECAY + 1.0
        self.count += 1

    def share(self) -> float | None:
        """The share, or None with too few completed requests."""
        if self.count < MIN_SAMPLES:
            return None
        return self.written / self.weight


class OutputEstimates:
    """Per key: what a request is expected to use, prompt plus output."""

    def __init__(self) -> None:
        self._keys: dict[str, OutputShare] = {}

    def estimate(self, key: str, prompt: int, worst: int) -> int:
        """The tokens a request of ``prompt`` tokens, at most ``worst`` in
        all, is expected to use; its worst case until the key has learned."""
        learned = self._keys.get(key)
        share = learned.share() if learned is not None else None
        if share is None:
            return worst
        return min(worst, prompt + math.ceil(share * max(0, worst - prompt)))

    def observe(self, key: str, written: int, most: int) -> None:
        """A completed request wrote ``written`` output tokens of at most
        ``most``."""
        self._keys.setdefault(key, OutputShare()).observe(written, most)
