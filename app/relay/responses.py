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
from app.relay.usage import take_usage
from app.routes import UsageNames

_DELTA = b".delta\n"
_COMPLETED = b"event: response.completed\n"
_FAILED = (b"event: error\n", b"event: response.failed\n")


class ResponsesRelay(StreamRelay):
    END = "response.completed"

    def __init__(
        self,
        record: RequestRecord,
        metrics: GatewayMetrics,
        *,
        usage: UsageNames,
        exact: bool,
        most: int | None,
    ) -> None:
        super().__init__(record, metrics, usage=usage, forward_usage=True)
        self._exact = exact
        self._most = most
        # Bytes of output text sent, counted when ``exact``.
        self._text_bytes = 0

    def count_partial_output(self) -> None:
        if not self._exact:
            super().count_partial_output()
            return
        most = self._most
        self._record.output_at_least(min(self._text_bytes, most or self._text_bytes))

    def _first_token_in(self, data: bytes) -> bool:
        return _DELTA in data

    def _read(self, data: bytes) -> bytes:
        if _COMPLETED in data:
            self._saw_done = True
            self._take_completed(data)
        if any(failed in data for failed in _FAILED):
            self._engine_error = True
        return data

    def _count_sent(self, data: bytes) -> None:
        self._events += data.count(_DELTA)
        if self._exact:
            self._count_text(data)

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
            take_usage(
                response.get("usage") if isinstance(response, dict) else None,
                self._usage,
                self._record,
            )
