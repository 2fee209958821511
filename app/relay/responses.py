"""A Responses API stream: named events, ended by ``response.completed``.

vLLM 0.32 streams a response as ``event: <type>`` / ``data: {...}`` pairs:
``response.created``, ``response.in_progress``, the output item and content
part opened, one ``response.output_text.delta`` (or reasoning, or function
call arguments ``.delta``) per step of the engine, their ``.done`` events,
and last ``response.completed``, whose response carries ``usage``
(``input_tokens``, ``output_tokens``). There is no ``data: [DONE]``: a
stream ends whole with ``response.completed``, and a failed generation ends
with an ``event: error`` instead. The events pass through as they are; the
relay reads event names (a raw newline only ends a line: JSON escapes it),
and parses JSON once, for the completed response's usage.

A stream cut short has no usage. vLLM puts what it has in each delta
(several tokens when the client reads slower than the engine writes: four
in one delta, measured on an idle engine) and its Responses API reports no
usage per event, so counting one token per delta event is a lower bound: a
client could leave just before the end and pay a fraction. A stream charged
to a key (``exact``) is counted from above instead: the bytes of the text it
was sent (UTF-8; every token of a byte-level tokenizer writes at least one
byte), at most its output bound. That reads each delta's JSON, which only
charged streams do.
"""

from app.metrics import GatewayMetrics
from app.record import RequestRecord
from app.relay.events import event_json, split_events
from app.relay.stream import StreamRelay

_DELTA = b".delta\n"
_COMPLETED = b"event: response.completed\n"
_FAILED = (b"event: error\n", b"event: response.failed\n")


class ResponsesRelay(StreamRelay):
    END = "response.completed"

    def __init__(
        self, record: RequestRecord, metrics: GatewayMetrics, *, exact: bool, most: int | None
    ) -> None:
        super().__init__(record, metrics, forward_usage=True)
        self._exact = exact
        self._most = most
        # Bytes of output text sent, counted when ``exact``.
        self._text_bytes = 0

    def feed(self, raw: bytes, now: float) -> bytes:
        data = self._splitter.feed(raw)
        if not data:
            return data
        record = self._record
        if record.first_token_at is None and _DELTA in data:
            record.first_token_at = now
            record.phase = "streaming"
            self._ttft.observe(now - record.arrival, record.exemplar())
        if _COMPLETED in data:
            self._saw_done = True
            self._take_completed(data)
        if any(failed in data for failed in _FAILED):
            self._engine_error = True
        if record.first_token_at is not None:
            self._events += data.count(_DELTA)
            if self._exact:
                self._count_text(data)
            if self._last_sent:
                self._inter_token.observe(now - self._last_sent)
            self._last_sent = now
        return data

    def count_partial_output(self) -> None:
        record = self._record
        if record.completion_tokens is not None or not self._exact:
            super().count_partial_output()
            return
        if self._text_bytes:
            most = self._most
            record.completion_tokens = min(self._text_bytes, most or self._text_bytes)

    def _count_text(self, data: bytes) -> None:
        for event in split_events(data):
            end = event.find(b"\n")
            if not event[:end].endswith(b".delta"):
                continue
            payload = event_json(event[end + 1 :])
            delta = payload.get("delta") if isinstance(payload, dict) else None
            if isinstance(delta, str):
                self._text_bytes += len(delta.encode("utf-8", "surrogatepass"))

    def _take_completed(self, data: bytes) -> None:
        for event in split_events(data):
            if not event.startswith(_COMPLETED):
                continue
            payload = event_json(event[len(_COMPLETED) :])
            response = payload.get("response") if isinstance(payload, dict) else None
            usage = response.get("usage") if isinstance(response, dict) else None
            if isinstance(usage, dict):
                self._record.prompt_tokens = usage.get("input_tokens")
                self._record.completion_tokens = usage.get("output_tokens")
