"""Measuring one SSE completion stream as a client sees it.

Kept cheap because a load generator runs many streams on one core: events
are cut with the gateway's own splitter (blank lines, any of SSE's line ends,
bytes untouched), and JSON is parsed only until the first token and for
chunks that carry usage.
"""

from dataclasses import dataclass, field

from app.relay.events import EventSplitter, event_json, has_content, split_events


@dataclass
class StreamMeter:
    started: float
    first_token: float | None = None
    last_token: float | None = None
    content_events: int = 0
    completion_tokens: int | None = None
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
    def mean_gap(self) -> float | None:
        return sum(self.gaps) / len(self.gaps) if self.gaps else None

    @property
    def tokens(self) -> int:
        return self.completion_tokens if self.completion_tokens is not None else self.content_events
