"""A chat or completion stream whose every chunk says what it has used so far.

A stream charged to a key's token limit pays what it generated, also when
its client leaves before the engine's final usage chunk. Counting the chunks
sent is not that: vLLM puts as many tokens in a chunk as it has (the request's
``stream_interval``, or a client that reads slower than the engine writes),
so a client could stream many tokens a chunk, leave, and pay for one each.
So such a stream asks the engine for its usage in every chunk (vLLM's
``stream_options.continuous_usage_stats``), and the charge of a stream cut
short is the last usage the engine reported for each of its choices.

What the client receives stays what the engine would have sent it: the
usage of each chunk is cut out again, byte for byte, unless the client
asked for it itself. vLLM writes a chunk's usage as ``,"usage":{...}``, an
object of counts only (numbers, ``null`` or one nested object of counts),
so its end is found by counting braces. That is work per event, which only
these streams do; every other stream stays on ``StreamRelay``'s path.
"""

import re

from app.observe.metrics import GatewayMetrics
from app.relay.events import event_json, split_events
from app.relay.stream import StreamRelay
from app.relay.usage import usage_counts
from app.request.record import RequestRecord
from app.request.routes import UsageNames

_CHUNK_USAGE = b',"usage":{'
_COMPLETION = re.compile(rb'"completion_tokens":(\d+)')
# A content chunk's choice; a transcription's has no index (it has one).
_CHOICE = re.compile(rb'"choices":\[\{(?:"index":(\d+))?')


class ExactUsageRelay(StreamRelay):
    def __init__(
        self,
        record: RequestRecord,
        metrics: GatewayMetrics,
        *,
        usage: UsageNames,
        forward_usage: bool,
        forward_chunk_usage: bool,
        prompts: int,
    ) -> None:
        super().__init__(record, metrics, usage=usage, forward_usage=forward_usage)
        self._forward_chunk_usage = forward_chunk_usage
        self._prompts = prompts
        # Each choice's last usage object, as the engine wrote it.
        self._seen: dict[int, bytes] = {}

    def _take_usage(self, data: bytes) -> bytes:
        kept = []
        for event in split_events(data):
            start = event.find(_CHUNK_USAGE)
            choice = _CHOICE.search(event) if start >= 0 else None
            if choice is None:
                # No usage, or the final usage-only chunk: as any stream.
                kept.append(super()._take_usage(event) if start >= 0 else event)
                continue
            opening = start + len(_CHUNK_USAGE) - 1
            end = _object_end(event, opening)
            if end < 0:
                kept.append(event)
                continue
            self._seen[int(choice.group(1) or 0)] = event[opening:end]
            if not self._forward_chunk_usage:
                event = event[:start] + event[end:]
            kept.append(event)
        return b"".join(kept)

    @property
    def counted_tokens(self) -> float | None:
        """What the engine last said each choice had generated (None until a
        chunk said it)."""
        if not self._seen:
            return None
        total = 0
        for usage in self._seen.values():
            found = _COMPLETION.search(usage)
            total += int(found.group(1)) if found else 0
        return float(total) if total else None

    def count_partial_output(self) -> None:
        """A stream that ended early: what the engine last said each of its
        choices had generated."""
        record = self._record
        if record.completion_tokens is not None or not self._seen:
            super().count_partial_output()
            return
        completion, prompts = 0, set()
        for usage in self._seen.values():
            prompt, output = usage_counts(event_json(b"data: " + usage), self._usage)
            completion += output or 0
            prompts.add(prompt)
        # One prompt's count, when every choice says the same of it.
        (prompt,) = prompts if self._prompts == 1 and len(prompts) == 1 else (None,)
        record.used(prompt, completion)


def _object_end(data: bytes, opening: int) -> int:
    """The index just past the JSON object of counts opening at ``opening``
    (-1: it does not end in ``data``). From brace to closing brace, each
    step counting the objects opened on the way (no strings in counts)."""
    depth, at = 0, opening
    while True:
        close = data.find(b"}", at)
        if close < 0:
            return -1
        depth += data.count(b"{", at, close) - 1
        if depth == 0:
            return close + 1
        at = close + 1
