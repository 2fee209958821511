"""Log set-up: the application's log on stderr and the access log (one line
per API request, the fields a ``RequestRecord`` logs) on stdout, both in
the one format ``GATEWAY_LOG_FORMAT`` chooses — a line of text each, or a
JSON object each. Every line carries the request id where there is one, and
a JSON line the ``trace_id`` and ``span_id`` of the span it was written in
when traces are on (``app.observe.tracing``)."""

import json
import logging
import sys
import time
from contextvars import ContextVar
from typing import Any, Literal

from opentelemetry import trace

from app.serve.request_id import RequestIdLogFilter

LogFormat = Literal["json", "text"]

# Set by a response that leaves its HTTP response unfinished on purpose (a
# client that stopped reading is dropped mid-stream and the server closes
# the connection): the server's own complaint about it would be a second
# log line for what the gateway already logged.
left_unfinished: ContextVar[bool] = ContextVar("left_unfinished", default=False)
_UNFINISHED = "ASGI callable returned without completing response."


def _timestamp(record: logging.LogRecord) -> str:
    ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
    return f"{ts}.{int(record.msecs):03d}Z"


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields: dict[str, Any] = getattr(record, "fields", {})
    return fields


def _trace_ids() -> dict[str, str]:
    """The current span's ids, as trace backends print them (hex)."""
    span = trace.get_current_span().get_span_context()
    if not span.is_valid:
        return {}
    return {"trace_id": f"{span.trace_id:032x}", "span_id": f"{span.span_id:016x}"}


class _AccessJson(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {"ts": _timestamp(record), **_fields(record), **_trace_ids()}
        return json.dumps(line, separators=(",", ":"))


class _AccessText(logging.Formatter):
    """``key=value`` pairs (logfmt), the empty fields left out."""

    def format(self, record: logging.LogRecord) -> str:
        pairs = " ".join(
            f"{key}={_logfmt(value)}" for key, value in _fields(record).items() if value is not None
        )
        return f"{_timestamp(record)} access {pairs}"


class _AppJson(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "request_id": getattr(record, "request_id", "-"),
            "message": record.getMessage(),
            **_trace_ids(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, separators=(",", ":"))


def _logfmt(value: object) -> str:
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if not text or any(c in text for c in ' "=') or any(ord(c) < 32 for c in text):
        return json.dumps(text)
    return text


class _DeliberatelyUnfinished(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg == _UNFINISHED and left_unfinished.get())


def configure_logging(level: str, log_format: LogFormat = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RequestIdLogFilter())
    handler.setFormatter(
        _AppJson()
        if log_format == "json"
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("uvicorn.error").addFilter(_DeliberatelyUnfinished())

    access = logging.getLogger("gateway.access")
    access_handler = logging.StreamHandler(sys.stdout)
    access_handler.setFormatter(_AccessJson() if log_format == "json" else _AccessText())
    access.handlers[:] = [access_handler]
    access.propagate = False
