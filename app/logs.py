"""Log set-up: plain lines with the request id, and the access log as one
JSON object per line."""

import json
import logging
import sys
import time
from contextvars import ContextVar

from app.request_id import RequestIdLogFilter

# Set by a response that leaves its HTTP response unfinished on purpose (a
# client that stopped reading is dropped mid-stream and the server closes
# the connection): the server's own complaint about it would be a second
# log line for what the gateway already logged.
left_unfinished: ContextVar[bool] = ContextVar("left_unfinished", default=False)
_UNFINISHED = "ASGI callable returned without completing response."


class _AccessFormatter(logging.Formatter):
    """One JSON object per request: the fields a ``RequestRecord`` logs."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        fields = getattr(record, "fields", {})
        return json.dumps({"ts": f"{ts}.{int(record.msecs):03d}Z", **fields}, separators=(",", ":"))


class _DeliberatelyUnfinished(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg == _UNFINISHED and left_unfinished.get())


def configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RequestIdLogFilter())
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # httpx logs every engine call (health checks included) at INFO.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("uvicorn.error").addFilter(_DeliberatelyUnfinished())

    access = logging.getLogger("gateway.access")
    access_handler = logging.StreamHandler(sys.stdout)
    access_handler.setFormatter(_AccessFormatter())
    access.handlers[:] = [access_handler]
    access.propagate = False
