"""Cutting an SSE byte stream into whole events, without touching the bytes.

The relay forwards the engine's bytes as they arrive, but only in whole
events: a keep-alive ping or a final error event must never land inside a
half-sent event. An event ends at an empty line, and SSE lines end with CRLF,
LF or CR only, so the search below looks for two line ends in a row and
nothing else. (Splitting with ``str.splitlines`` or httpx's ``aiter_lines``
would also cut at U+2028, U+0085 and friends, which the engine writes raw
inside JSON strings.)
"""

import json
import re
from collections.abc import Iterator
from typing import Any

# Two consecutive line ends. A CR directly followed by LF is one line end, so
# a lone CR is ``\r(?!\n)``.
_EVENT_END = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r(?!\n)|\n)")
# The longest line-end pair is 4 bytes: after new bytes arrive, a match can
# start at most 3 bytes before them.
_OVERLAP = 3


class EventSplitter:
    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes) -> bytes:
        """Add bytes; return every event now complete (possibly several,
        possibly none), concatenated and byte-identical to the input."""
        if not self._pending and data.endswith(b"\n\n"):
            # The common case, one or more whole events as the engine writes
            # them: no search needed.
            return data
        if self._pending:
            start = max(0, len(self._pending) - _OVERLAP)
            data = self._pending + data
        else:
            start = 0
        end = 0
        for match in _EVENT_END.finditer(data, start):
            end = match.end()
        if end == 0:
            self._pending = data
            return b""
        self._pending = data[end:]
        return data[:end]

    @property
    def pending(self) -> bytes:
        """Bytes of an event not yet complete."""
        return self._pending


def split_events(data: bytes) -> Iterator[bytes]:
    """The events in a run of whole events (the output of ``feed``)."""
    start = 0
    for match in _EVENT_END.finditer(data):
        yield data[start : match.end()]
        start = match.end()


def event_json(event: bytes) -> Any:
    """The JSON payload of a single-line ``data:`` event, or None."""
    line = event.strip()
    if not line.startswith(b"data:"):
        return None
    payload = line[5:].strip()
    if not payload.startswith(b"{"):
        return None
    try:
        return json.loads(payload)
    except ValueError:
        return None


def has_content(chunk: Any) -> bool:
    """Whether a completion chunk carries generated output (not just the role)."""
    if not isinstance(chunk, dict):
        return False
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        if choice.get("text"):
            return True
        delta = choice.get("delta")
        if isinstance(delta, dict) and any(
            delta.get(key) for key in ("content", "reasoning_content", "reasoning", "tool_calls")
        ):
            return True
        if choice.get("finish_reason"):
            return True
    return False
