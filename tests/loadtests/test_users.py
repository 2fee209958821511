"""The locust users send ``LOAD_API_KEY`` to a keyed gateway, on the model
lookup and on every completion (run in a subprocess: importing locust
patches the process with gevent)."""

import json
import os
import subprocess
import sys

from deploy.local import ROOT

# A server that records what each request carried and refuses the
# completions (the users then count 401s, as against a gateway whose keys
# they lack) — enough to see the header, no engine needed.
PROBE = """
import gevent, json, http.server, threading
from locust import events
from locust.env import Environment
from loadtests.users import ChatUser

seen = []
class Handler(http.server.BaseHTTPRequestHandler):
    def _answer(self, status, body=b""):
        seen.append([self.command, self.path, self.headers.get("authorization")])
        self.send_response(status)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self._answer(200, json.dumps({"data": [{"id": "tiny"}]}).encode())
    def do_POST(self):
        self.rfile.read(int(self.headers["content-length"]))
        self._answer(401)
    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
env = Environment(user_classes=[ChatUser], events=events,
                  host=f"http://127.0.0.1:{server.server_address[1]}")
runner = env.create_local_runner()
runner.start(1, spawn_rate=1)
for _ in range(200):
    if sum(1 for s in seen if s[0] == "POST") >= 2:
        break
    gevent.sleep(0.05)
runner.quit()
print(json.dumps(seen))
"""


def run_users(**env: str) -> list[list[str | None]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("LOAD_")} | env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    seen: list[list[str | None]] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


def test_the_users_send_the_load_api_key_on_every_request() -> None:
    seen = run_users(LOAD_API_KEY="sk-load-test")
    assert ["GET", "/v1/models", "Bearer sk-load-test"] in seen
    posts = [s for s in seen if s[0] == "POST"]
    assert len(posts) >= 2
    assert all(s[2] == "Bearer sk-load-test" for s in posts)


def test_without_a_key_they_send_none() -> None:
    seen = run_users()
    assert seen
    assert all(s[2] is None for s in seen)
