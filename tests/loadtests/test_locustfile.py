"""The locustfile offers locust exactly the shape asked for (checked in a
subprocess: importing locust patches the process with gevent)."""

import json
import os
import subprocess
import sys

import pytest

from deploy.local import ROOT

PROBE = """
import json, runpy
from locust.util.load_locustfile import is_shape_class, is_user_class
found = runpy.run_path("loadtests/locustfile.py")
print(json.dumps({
    "shapes": sorted(v.shape for v in found.values() if is_shape_class(v)),
    "users": sorted(k for k, v in found.items() if is_user_class(v)),
}))
"""


def probe(**env: str) -> dict[str, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "LOAD_SHAPE"} | env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    found: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


@pytest.mark.parametrize("shape", ["degradation", "classes", "spike", "ramp", "soak"])
def test_one_named_shape_runs(shape: str) -> None:
    assert probe(LOAD_SHAPE=shape)["shapes"] == [shape]


def test_the_web_ui_is_offered_every_shape_and_user() -> None:
    found = probe()
    assert found["shapes"] == ["classes", "degradation", "ramp", "soak", "spike"]
    assert found["users"] == [
        "AbandoningUser",
        "BulkUser",
        "ChatUser",
        "PriorityChatUser",
        "RAGUser",
        "SummaryUser",
        "TenantMixUser",
    ]
