"""What to forward of one engine stream, and what it says about the request.

This is the hot path's logic: every upstream read crosses ``StreamRelay.feed``.
Per read it does one regex scan for event ends, substring tests and one
count for the usage chunk, the ``[DONE]`` marker, an engine error and the
events sent, and one histogram observation. JSON is parsed only until the
first token and for the final usage chunk. The sends around it are
``app.relay.sse``; the client and the drain are watched by ``app.flight``.

Each route's stream has its own rules, in a relay of its own: a chat or
completion stream here, one whose chunks each carry the usage so far
(``app.relay.exact``: a stream charged to a key), the Responses API's named
events (``app.relay.responses``). ``relay_for`` picks one per request.
"""

from app.errors import UpstreamFailed
from app.metrics import GatewayMetrics
from app.record import RequestRecord
from app.relay.events import EventSplitter, event_json, has_content, split_events

_USAGE = b'"usage":{'
_ERROR = b'data: {"error"'
_DONE = b"data: [DONE]"


class StreamRelay:
    # What ends a whole stream.
    END = "[DONE]"

    def __init__(
        self, record: RequestRecord, metrics: GatewayMetrics, *, forward_usage: bool
    ) -> None:
        self._record = record
        self._inter_token = metrics.inter_token
        self._ttft = metrics.ttft
        self._forward_usage = forward_usage
        self._splitter = EventSplitter()
        self._last_sent = 0.0
        # Events sent from the first token on: one token each, as the engine
        # streams them (an estimate of a stream's output when it ends early).
        self._events = 0
        self._saw_done = False
        self._engine_error = False

    def feed(self, raw: bytes, now: float) -> bytes:
        """Take bytes read from the engine at ``now``; return the whole
        events to send the client (possibly none)."""
        data = self._splitter.feed(raw)
        if not data:
            return data
        record = self._record
        if record.first_token_at is None:
            self._look_for_first_token(data, now)
        if _USAGE in data:
            data = self._take_usage(data)
        if _DONE in data:
            self._saw_done = True
        if _ERROR in data:
            self._engine_error = True
        if data and record.first_token_at is not None:
            self._events += data.count(b"data: {")
            if self._last_sent:
                self._inter_token.observe(now - self._last_sent)
            self._last_sent = now
        return data

    def restart(self) -> None:
        """Start over on another engine's stream (nothing was sent yet)."""
        self._splitter = EventSplitter()
        self._saw_done = self._engine_error = False

    def finish(self) -> None:
        """The engine ended the stream: record how it ended."""
        if not self._saw_done:
            raise UpstreamFailed(f"the engine ended the stream before {self.END}")
        if self._engine_error:
            self._record.finish("failed", status=200, error="the engine sent an error event")
        else:
            self._record.finish("completed", status=200)

    def count_partial_output(self) -> None:
        """A stream that ended early has no usage chunk: count what it sent
        (one token per content chunk, as the engine streams them)."""
        record = self._record
        if record.completion_tokens is None and self._events:
            record.completion_tokens = self._events

    def _look_for_first_token(self, data: bytes, now: float) -> None:
        for event in split_events(data):
            if has_content(event_json(event)):
                record = self._record
                record.first_token_at = now
                record.phase = "streaming"
                self._ttft.observe(now - record.arrival, record.exemplar())
                return

    def _take_usage(self, data: bytes) -> bytes:
        kept = []
        for event in split_events(data):
            if _USAGE in event:
                chunk = event_json(event)
                usage = chunk.get("usage") if isinstance(chunk, dict) else None
                if isinstance(usage, dict):
                    self._record.prompt_tokens = usage.get("prompt_tokens")
                    self._record.completion_tokens = usage.get("completion_tokens")
                # Only the usage-only chunk (no choices) is the gateway's to
                # drop; a content chunk that carries usage too (continuous
                # usage stats) always goes through.
                if not self._forward_usage and not _has_choices(chunk):
                    continue
            kept.append(event)
        return b"".join(kept)


def _has_choices(chunk: object) -> bool:
    return isinstance(chunk, dict) and bool(chunk.get("choices"))
