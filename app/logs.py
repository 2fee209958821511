"""Log set-up: plain lines with the request id, and the access log as one
JSON object per line."""

import json
import logging
import sys
import time

from app.request_id import RequestIdLogFilter


class _AccessFormatter(logging.Formatter):
    """One JSON object per request: the fields a ``RequestRecord`` logs."""

    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        fields = getattr(record, "fields", {})
        return json.dumps({"ts": f"{ts}.{int(record.msecs):03d}Z", **fields}, separators=(",", ":"))


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

    access = logging.getLogger("gateway.access")
    access_handler = logging.StreamHandler(sys.stdout)
    access_handler.setFormatter(_AccessFormatter())
    access.handlers[:] = [access_handler]
    access.propagate = False
