"""What to forward of one engine stream, and what it says about the request.

This is the hot path's logic: every upstream read crosses ``StreamRelay.feed``.
Per read it does one regex scan for event ends, substring tests and one
count for the usage chunk, the ``[DONE]`` marker, an engine error and the
events sent, and one histogram observation: what the route's contract needs
(the first token's time, the usage at the end, an error event). JSON is
parsed only until the first token and for the final usage chunk. What
admission reads of a running stream it samples when it wants it (the
relay is its ``StreamGauge``, ``app.relay.lane``): nothing of admission runs
per event. The sends around it are ``app.relay.sse``; the client and the
drain are watched by ``app.request.flight``.

Each route's stream has its own rules, as a small variation of this relay:
a chat or completion stream here, one whose chunks each carry the usage so
far (``app.relay.exact``: a stream charged to a key), the Responses API's
named events (``app.relay.named``). ``relay_for`` picks one per request,
by its route's stream kind (``app.request.routes``).
"""

from app.observe.metrics import GatewayMetrics
from app.relay.events import EventSplitter, event_json, has_content, split_events
from app.relay.usage import take_usage
from app.request.errors import UpstreamFailed
from app.request.record import RequestRecord
from app.request.routes import UsageNames

_USAGE = b'"usage":{'
_ERROR = b'data: {"error"'
_DONE = b"data: [DONE]"


class StreamRelay:
    """The relay of a stream of OpenAI's chunks, and the frame of every
    route's: a route's own stream overrides what it reads in the events
    (``_first_token_in``, ``_read``, ``_count_sent``), never the path itself."""

    # What ends a whole stream.
    END = "[DONE]"

    def __init__(
        self,
        record: RequestRecord,
        metrics: GatewayMetrics,
        *,
        usage: UsageNames,
        forward_usage: bool,
    ) -> None:
        self._record = record
        self._inter_token = metrics.inter_token
        self._ttft = metrics.ttft
        self._usage = usage
        self._forward_usage = forward_usage
        self._splitter = EventSplitter()
        self._last_sent = 0.0
        # Events sent from the first token on: one token each, as the engine
        # streams them (an estimate of a stream's output when it ends early).
        self._events = 0
        self._saw_done = False
        self._engine_error = False

    # --- what admission reads of it (``app.relay.lane.StreamGauge``) ---------------

    @property
    def events(self) -> int:
        """Events sent from the first token on."""
        return self._events

    @property
    def counted_tokens(self) -> float | None:
        """What the engine said it had generated: nothing, on this stream."""
        return None

    @property
    def first_token_at(self) -> float | None:
        return self._record.first_token_at

    def feed(self, raw: bytes, now: float) -> bytes:
        """Take bytes read from the engine at ``now``; return the whole
        events to send the client (possibly none)."""
        data = self._splitter.feed(raw)
        if not data:
            return data
        record = self._record
        if record.first_token_at is None and self._first_token_in(data):
            record.first_token(now)
            self._ttft.observe(now - record.arrival, record.exemplar())
        data = self._read(data)
        if data and record.first_token_at is not None:
            self._count_sent(data)
            if self._last_sent:
                self._inter_token.observe(now - self._last_sent)
            self._last_sent = now
        return data

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
        self._record.output_at_least(self._events)

    # --- what a route's stream says in its events -------------------------------

    def _first_token_in(self, data: bytes) -> bool:
        return any(has_content(event_json(event)) for event in split_events(data))

    def _read(self, data: bytes) -> bytes:
        """Take what ``data``'s events say (usage, the end, an engine
        error); return what of them goes to the client."""
        if _USAGE in data:
            data = self._take_usage(data)
        if _DONE in data:
            self._saw_done = True
        if _ERROR in data:
            self._engine_error = True
        return data

    def _count_sent(self, data: bytes) -> None:
        self._events += data.count(b"data: {")

    def _take_usage(self, data: bytes) -> bytes:
        kept = []
        for event in split_events(data):
            if _USAGE in event:
                chunk = event_json(event)
                take_usage(chunk, self._usage, self._record)
                # Only the usage-only chunk (no choices) is the gateway's to
                # drop; a content chunk that carries usage too (continuous
                # usage stats) always goes through.
                if not self._forward_usage and not _has_choices(chunk):
                    continue
            kept.append(event)
        return b"".join(kept)


def _has_choices(chunk: object) -> bool:
    return isinstance(chunk, dict) and bool(chunk.get("choices"))
