"""Both logs in the one format ``GATEWAY_LOG_FORMAT`` chooses: a JSON object
a line, or a line of text each (run in a subprocess: logging is the
process's)."""

import json
import os
import subprocess
import sys

from deploy.local import ROOT

PROBE = """
import logging, sys
from app.observe.logs import configure_logging
configure_logging("info", sys.argv[1])
logging.getLogger("gateway").warning("engine %s is up", "e:8000")
fields = {"request_id": "r1", "route": "chat", "status": 200, "retried": False,
          "error": None, "model": "tiny model"}
logging.getLogger("gateway.access").info("request finished", extra={"fields": fields})
"""


def run(log_format: str) -> tuple[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, log_format],
        cwd=ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stderr.strip(), done.stdout.strip()


def test_json_makes_both_logs_one_object_a_line() -> None:
    app, access = run("json")
    line = json.loads(app)
    assert (line["level"], line["logger"], line["message"]) == (
        "warning",
        "gateway",
        "engine e:8000 is up",
    )
    assert line["request_id"] == "-"
    fields = json.loads(access)
    assert (fields["request_id"], fields["status"], fields["retried"]) == ("r1", 200, False)
    assert fields["error"] is None
    assert fields["ts"].endswith("Z")


def test_text_makes_both_logs_lines_of_text() -> None:
    app, access = run("text")
    assert app.endswith("WARNING gateway [-] engine e:8000 is up")
    assert " access request_id=r1 route=chat status=200 retried=false " in access + " "
    assert 'model="tiny model"' in access
    assert "error=" not in access  # empty fields are left out
    for line in (app, access):
        try:
            json.loads(line)
        except ValueError:
            continue
        raise AssertionError(f"a JSON line in the text format: {line}")


TRACED = """
import logging, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from app.observe.logs import configure_logging
trace.set_tracer_provider(TracerProvider())
configure_logging("info", "json")
with trace.get_tracer("probe").start_as_current_span("request") as span:
    ids = span.get_span_context()
    print(f"{ids.trace_id:032x} {ids.span_id:016x}", file=sys.stderr)
    logging.getLogger("gateway").warning("inside")
    fields = {"request_id": "r1", "status": 200}
    logging.getLogger("gateway.access").info("request finished", extra={"fields": fields})
"""


def test_json_lines_written_in_a_span_carry_its_trace_and_span_ids() -> None:
    done = subprocess.run(
        [sys.executable, "-c", TRACED],
        cwd=ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    ids, app = done.stderr.strip().splitlines()
    trace_id, span_id = ids.split()
    for line in (json.loads(app), json.loads(done.stdout)):
        assert (line["trace_id"], line["span_id"]) == (trace_id, span_id)
    # Outside a span there are none.
    app, access = run("json")
    assert "trace_id" not in json.loads(app)
    assert "trace_id" not in json.loads(access)
