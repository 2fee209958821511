"""The two classes' users: their X-Priority and objective to the gateway,
their class's priority in the body only when asked (straight at vLLM), the
objective in each record (run in a subprocess: importing locust patches the
process with gevent)."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from deploy.local import ROOT

# A server that records each completion's headers and body and refuses it
# (429, Retry-After 0: the users come straight back), enough to see what
# the users send; no engine needed.
PROBE = """
import gevent, json, http.server, sys, threading
from locust import events
from locust.env import Environment
from loadtests.users import BulkUser, PriorityChatUser

seen = []
class Handler(http.server.BaseHTTPRequestHandler):
    def _answer(self, status, body=b"", headers=()):
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self._answer(200, json.dumps({"data": [{"id": "tiny"}]}).encode())
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        seen.append({"headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
        self._answer(429, headers=[("retry-after", "0")])
    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
env = Environment(user_classes=[PriorityChatUser, BulkUser], events=events,
                  host=f"http://127.0.0.1:{server.server_address[1]}")
runner = env.create_local_runner()
runner.start(2, spawn_rate=2)
for _ in range(200):
    if {s["headers"].get("x-priority") for s in seen} >= {"high", "low"}:
        break
    gevent.sleep(0.05)
runner.quit()
print(json.dumps(seen))
"""


def run_users(tmp_path: Path, **env: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What the server saw, and the records the users wrote."""
    records = tmp_path / "records.jsonl"
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("LOAD_")}
        | {"LOAD_RECORDS": str(records)}
        | env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    seen: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    return seen, [line for line in lines if "event" not in line]


def by_priority(seen: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {s["headers"]["x-priority"]: s for s in seen}


def test_chat_is_high_and_short_bulk_low_and_long(tmp_path: Path) -> None:
    seen, records = run_users(tmp_path)
    chat, bulk = by_priority(seen)["high"], by_priority(seen)["low"]
    assert chat["body"]["max_tokens"] == 24
    assert bulk["body"]["max_tokens"] == 200
    assert chat["body"]["stream"]
    assert bulk["body"]["stream"]
    assert len(bulk["body"]["messages"][-1]["content"].split()) >= 150
    # Nothing asked: no priority in the body, no objective.
    assert all("priority" not in s["body"] for s in seen)
    assert all("x-slo-ttft-ms" not in s["headers"] for s in seen)
    assert {r["user"] for r in records} == {"chat", "bulk"}
    assert all(r["status"] == 429 and r["slo"] is None for r in records)


def test_asked_the_body_carries_each_classs_priority_for_vllm(tmp_path: Path) -> None:
    seen, _ = run_users(tmp_path, LOAD_BODY_PRIORITY="1")
    assert by_priority(seen)["high"]["body"]["priority"] == -1
    assert by_priority(seen)["low"]["body"]["priority"] == 1


def test_an_objective_goes_in_the_header_and_in_the_records(tmp_path: Path) -> None:
    seen, records = run_users(tmp_path, LOAD_SLO_MS_CHAT="1500")
    assert by_priority(seen)["high"]["headers"]["x-slo-ttft-ms"] == "1500"
    assert "x-slo-ttft-ms" not in by_priority(seen)["low"]["headers"]
    assert {r["slo"] for r in records if r["user"] == "chat"} == {1.5}
    assert {r["slo"] for r in records if r["user"] == "bulk"} == {None}
