"""What to forward of one engine stream, and what it says about the request.

This is the hot path's logic: every upstream read crosses ``StreamRelay.feed``.
Per read it does one regex scan for event ends, substring tests and one
count for the usage chunk, the ``[DONE]`` marker, an engine error and the
events sent, one histogram observation and, until it is due and at most every
``_CHECK_EVERY`` seconds, one product for the hand-on of the stream's place
(``ending_within``). JSON is parsed only until the
first token and for the final usage chunk. The sends around it are
``app.relay.sse``; the client and the drain are watched by ``app.request.flight``.

Each route's stream has its own rules, as a small variation of this relay:
a chat or completion stream here, one whose chunks each carry the usage so
far (``app.relay.exact``: a stream charged to a key), the Responses API's
named events (``app.relay.named``). ``relay_for`` picks one per request,
by its route's stream kind (``app.request.routes``).
"""

from collections.abc import Callable

from app.observe.metrics import GatewayMetrics
from app.relay.events import EventSplitter, event_json, has_content, split_events
from app.relay.usage import take_usage
from app.request.errors import UpstreamFailed
from app.request.record import RequestRecord
from app.request.routes import UsageNames

_USAGE = b'"usage":{'
_ERROR = b'data: {"error"'
_DONE = b"data: [DONE]"
# The share of the time ahead over which a stream's pace must have been
# measured before it says when the stream ends (``ending_within``).
_PACE_SPAN = 0.5
# How often at most a stream looks whether its end is due: reading the time
# ahead and the tokens sent on every event was a tenth of the relay's work
# per event, for a decision a few hundredths of a second do not change (the
# time ahead is tenths of a second to seconds).
_CHECK_EVERY = 0.05


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
        # Called once when the stream will reach its token bound within
        # ``_ahead()`` seconds (``ending_within``).
        self._ending: Callable[[], None] | None = None
        self._bound = 0
        self._next_check = 0.0
        self._ahead: Callable[[], float] = _none
        self._per_event: Callable[[], float] = _one

    def ending_within(
        self,
        seconds: Callable[[], float],
        bound: int,
        call: Callable[[], None],
        per_event: Callable[[], float] | None = None,
    ) -> None:
        """Call ``call`` once, when the stream is ``seconds()`` from its
        ``bound`` of tokens — its ``max_tokens`` times its sequences — each
        event sent counted as ``per_event()`` tokens, both read at each
        check (``app.admission.refill``, *Handing on*; 0 seconds: not now).
        The time left is the tokens left at the pace the stream has kept so
        far, measured over half of ``seconds()`` at least; it is checked at
        an event at most every ``_CHECK_EVERY`` seconds. A stream that
        stops earlier (a stop token, a stop string) never calls it."""
        if bound > 0:
            self._ending, self._bound, self._ahead = call, bound, seconds
            self._per_event = per_event or _one

    @property
    def events(self) -> int:
        """Events sent from the first token on."""
        return self._events

    @property
    def tokens_sent(self) -> float:
        """The tokens sent so far, as counted for ``ending_within``."""
        return self._tokens_sent()

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
            if self._ending is not None and now >= self._next_check:
                self._next_check = now + _CHECK_EVERY
                self._check_ending(now, record.first_token_at)
        return data

    def _check_ending(self, now: float, first: float) -> None:
        ahead = self._ahead()
        if ahead <= 0:
            return
        events, span, sent = self._events, now - first, self._tokens_sent()
        left = self._bound - sent
        if left > 0:
            # The pace is trusted once measured over half the time it must
            # look ahead: a stream's first tokens often come in one read
            # (the engine wrote faster than a busy relay read), and a pace of
            # nothing would hand the place on at the first tokens. Half: a
            # stream of max_tokens 256 under overload lasts about 4 s, and
            # its place is due on 2-3 s before its end.
            if events < 2 or span < _PACE_SPAN * ahead:
                return
            # The pace: the tokens sent after the first event, over the span.
            if left * span * events / (sent * (events - 1)) > ahead:
                return
        call, self._ending = self._ending, None
        if call is not None:
            call()

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

    def _tokens_sent(self) -> float:
        """The tokens sent so far: the events, each counted as what its
        engine's streams carried an event."""
        return self._events * max(1.0, self._per_event())

    def _take_usage(self, data: bytes) -> bytes:
        kept = []
        for event in split_events(data):
            if _USAGE in event:
                chunk = event_json(event)
                take_usage(
                    chunk.get("usage") if isinstance(chunk, dict) else None,
                    self._usage,
                    self._record,
                )
                # Only the usage-only chunk (no choices) is the gateway's to
                # drop; a content chunk that carries usage too (continuous
                # usage stats) always goes through.
                if not self._forward_usage and not _has_choices(chunk):
                    continue
            kept.append(event)
        return b"".join(kept)


def _one() -> float:
    return 1.0


def _none() -> float:
    return 0.0


def _has_choices(chunk: object) -> bool:
    return isinstance(chunk, dict) and bool(chunk.get("choices"))
