"""Measuring one SSE completion stream as a client sees it.

Kept cheap because a load generator runs many streams on one core: events are
split on blank lines without touching their bytes, and JSON is parsed only
until the first token and for the final usage chunk.
"""

import json
from dataclasses import dataclass, field
from typing import Any


def _has_content(chunk: Any) -> bool:
    for choice in chunk.get("choices") or ():
        if choice.get("text") or (choice.get("delta") or {}).get("content"):
            return True
    return False


@dataclass
class StreamMeter:
    started: float
    first_token: float | None = None
    last_token: float | None = None
    content_events: int = 0
    completion_tokens: int | None = None
    gaps: list[float] = field(default_factory=list)
    _buffer: bytes = b""

    def feed(self, data: bytes, now: float) -> None:
        self._buffer += data
        *events, self._buffer = self._buffer.split(b"\n\n")
        for event in events:
            if not event.startswith(b"data: {"):
                continue
            if b'"usage"' in event:
                usage = json.loads(event[6:]).get("usage")
                if isinstance(usage, dict):
                    self.completion_tokens = usage.get("completion_tokens")
                    continue
            if self.first_token is None:
                if not _has_content(json.loads(event[6:])):
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
