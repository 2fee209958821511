"""Measuring one SSE completion stream as a client sees it.

Kept cheap because a load generator runs many streams on one core: events
are cut with the gateway's own splitter (blank lines, any of SSE's line ends,
bytes untouched), and JSON is parsed only until the first token and for
chunks that carry usage. Where the engine says what the request took (vLLM's
per-request ``metrics`` beside the final usage), its own queue and time to
first token are kept: the client's TTFT less them is what everything in
front of the engine's core added (its HTTP server, a gateway, the network).
"""

from dataclasses import dataclass, field
from typing import TypeGuard

from app.relay.events import EventSplitter, event_json, has_content, split_events


@dataclass
class StreamMeter:
    started: float
    first_token: float | None = None
    last_token: float | None = None
    content_events: int = 0
    completion_tokens: int | None = None
    # The engine's own queue and time to first token, in seconds (None: it
    # did not say).
    engine_time: float | None = None
    gaps: list[float] = field(default_factory=list)
    _splitter: EventSplitter = field(default_factory=EventSplitter)

    def feed(self, data: bytes, now: float) -> None:
        for event in split_events(self._splitter.feed(data)):
            if not event.startswith(b"data: {"):
                continue
            chunk = None
            if b'"usage"' in event:
                chunk = event_json(event)
                usage = chunk.get("usage") if isinstance(chunk, dict) else None
                if isinstance(usage, dict):
                    self.completion_tokens = usage.get("completion_tokens")
                if self.engine_time is None:
                    self.engine_time = _engine_time(chunk)
                if not (isinstance(chunk, dict) and chunk.get("choices")):
                    continue
            if self.first_token is None:
                if not has_content(chunk if chunk is not None else event_json(event)):
                    continue
                self.first_token = now
            elif self.last_token is not None:
                self.gaps.append(now - self.last_token)
            self.last_token = now
            self.content_events += 1

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.started

    @property
    def residual(self) -> float | None:
        """The client's TTFT less the engine's own queue and time to first token."""
        ttft = self.ttft
        return None if ttft is None or self.engine_time is None else ttft - self.engine_time

    @property
    def mean_gap(self) -> float | None:
        return sum(self.gaps) / len(self.gaps) if self.gaps else None

    @property
    def tokens(self) -> int:
        return self.completion_tokens if self.completion_tokens is not None else self.content_events


def _engine_time(chunk: object) -> float | None:
    metrics = chunk.get("metrics") if isinstance(chunk, dict) else None
    if not isinstance(metrics, dict):
        return None
    queue, first = metrics.get("queue_time_ms"), metrics.get("time_to_first_token_ms")
    if not (_number(queue) and _number(first)):
        return None
    return float(queue + first) / 1000


def _number(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
