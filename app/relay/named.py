"""A stream of named events: the Responses API's and Anthropic Messages'.

Both stream ``event: <name>`` / ``data: {...}`` pairs, with no ``data:
[DONE]``; each is one ``Framing`` of the one relay here. The events pass
through as they are; the relay reads event names (a raw newline only ends a
line: JSON escapes it) and parses JSON only for the events that carry usage
and, on a stream charged to a key, for each token's text.

- The Responses API (vLLM 0.32): ``response.created``, ``response.in_progress``,
  the output item and content part opened, one ``response.output_text.delta``
  (or reasoning, or function call arguments ``.delta``) per step of the
  engine, their ``.done`` events, and last ``response.completed``, whose
  response carries ``usage`` (``input_tokens``, ``output_tokens``). A failed
  generation ends with ``error`` or ``response.failed`` instead.
- Anthropic Messages: ``message_start`` (its message's usage: the input, and
  0 output), ``content_block_start``, one ``content_block_delta`` per step,
  ``content_block_stop``, ``message_delta`` (the final usage: input, cache
  reads and writes, output), ``message_stop``. A failed generation sends
  ``error``.

A stream cut short has no final usage. Both put what the engine has in each
delta (several tokens when the client reads slower than the engine writes:
even on an idle engine), and report no usage per
delta, so counting one token per delta is a lower bound: a client could
leave just before the end and pay a fraction. A stream charged to a key
(``exact``) is counted from above instead: the bytes of the text it was sent
(UTF-8; every token of a byte-level tokenizer writes at least one byte), at
most its output bound. That reads each delta's JSON, which only charged
streams do. Its prompt is the usage the stream said before its end (Messages'
``message_start``), else unknown (the key is charged its estimate).
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.observe.metrics import GatewayMetrics
from app.relay.events import event_json, split_events
from app.relay.stream import StreamRelay
from app.relay.usage import usage_counts
from app.request.record import RequestRecord
from app.request.routes import UsageNames


@dataclass(frozen=True)
class UsageAt:
    """An event that carries usage: its name line, the keys down to the
    usage object in its data, and whether its output count is the final one
    (``message_start``'s 0 is not)."""

    event: bytes
    path: tuple[str, ...]
    final: bool


@dataclass(frozen=True)
class Framing:
    # In a token event's name line (the first token is the first of them).
    token: bytes
    # The event that ends a whole stream, and those that end a failed one.
    end: bytes
    failed: tuple[bytes, ...]
    usage: tuple[UsageAt, ...]
    # A token event's text, from its data.
    text: Callable[[Any], object]


def _delta(payload: Any) -> object:
    return payload.get("delta") if isinstance(payload, dict) else None


def _block_delta(payload: Any) -> object:
    delta = _delta(payload)
    if not isinstance(delta, dict):
        return None
    return delta.get("text") or delta.get("thinking") or delta.get("partial_json")


RESPONSES = Framing(
    token=b".delta\n",
    end=b"event: response.completed\n",
    failed=(b"event: error\n", b"event: response.failed\n"),
    usage=(UsageAt(b"event: response.completed\n", ("response", "usage"), final=True),),
    text=_delta,
)
MESSAGES = Framing(
    token=b"event: content_block_delta\n",
    end=b"event: message_stop\n",
    failed=(b"event: error\n",),
    usage=(
        UsageAt(b"event: message_start\n", ("message", "usage"), final=False),
        UsageAt(b"event: message_delta\n", ("usage",), final=True),
    ),
    text=_block_delta,
)


class NamedEventRelay(StreamRelay):
    def __init__(
        self,
        record: RequestRecord,
        metrics: GatewayMetrics,
        *,
        framing: Framing,
        usage: UsageNames,
        exact: bool,
        most: int | None,
    ) -> None:
        super().__init__(record, metrics, usage=usage, forward_usage=True)
        self.END = framing.end.decode().removeprefix("event: ").strip()
        self._framing = framing
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
        return self._framing.token in data

    def _read(self, data: bytes) -> bytes:
        framing = self._framing
        if framing.end in data:
            self._saw_done = True
        if any(at.event in data for at in framing.usage):
            self._take_usage(data)
        if any(failed in data for failed in framing.failed):
            self._engine_error = True
        return data

    def _count_sent(self, data: bytes) -> None:
        token = self._framing.token
        self._events += data.count(token)
        if self._exact:
            for event in split_events(data):
                end = event.find(b"\n") + 1
                if token in event[:end]:
                    text = self._framing.text(event_json(event[end:]))
                    if isinstance(text, str):
                        self._text_bytes += len(text.encode("utf-8", "surrogatepass"))

    def _take_usage(self, data: bytes) -> bytes:
        for event in split_events(data):
            for at in self._framing.usage:
                if event.startswith(at.event):
                    self._take(at, event_json(event[len(at.event) :]))
        return data

    def _take(self, at: UsageAt, payload: Any) -> None:
        for key in at.path:
            payload = payload.get(key) if isinstance(payload, dict) else None
        if not isinstance(payload, dict):
            return
        prompt, output = usage_counts(payload, self._usage)
        record = self._record
        if at.final:
            record.used(prompt, output)
        elif prompt is not None:
            record.used(prompt, record.completion_tokens)
