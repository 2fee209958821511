"""Imports point one way, down: every module of ``app/`` has a floor, and it
imports only from floors below its own (or, on the same floor, from its own
package; the small shared modules at the bottom import each other freely).

The floors, from the top: the entry (the command, the process runner) → the
app factory → the routes → ``pipeline`` → ``flight`` → ``services`` (what one
app works with) → ``admission/`` and ``keys/`` → ``engine/`` → ``routing/``
and ``state/`` → ``relay/`` → the small shared modules. A module that no entry
of ``FLOORS`` names fails the test: a new module is placed on purpose, not by
a default."""

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[1] / "app"

SHARED = 10

# The longest key that is the module or one of its packages gives its floor.
FLOORS: dict[str, int] = {
    "app.__main__": 110,
    "app.serve.cli": 100,
    "app.serve.run": 100,
    "app.main": 90,
    "app.api": 80,
    # What /status shows: the services of one app, read.
    "app.observe.status": 75,
    # The Batch API: its lines go through the pipeline as any request.
    "app.batch": 75,
    "app.request.pipeline": 70,
    "app.request.flight": 60,
    # A stream's queue comments read admission's forecast.
    "app.request.queue_status": 55,
    "app.serve.services": 50,
    # Both ask the engines (their client and pool) for what they need.
    "app.request.response_ids": 45,
    "app.tokens": 45,
    "app.admission": 40,
    "app.keys": 40,
    # The span of an engine call names the engine routing picked.
    "app.observe.tracing": 35,
    "app.engine": 32,
    "app.routing": 30,
    "app.state": 30,
    "app.relay": 20,
    "app.request": SHARED,
    "app.observe": SHARED,
    "app.serve": SHARED,
    "app.bodies": SHARED,
    "app.capacity": SHARED,
    "app.settings": SHARED,
    "app": SHARED,
}


def module_name(path: Path) -> str:
    parts = path.relative_to(APP.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def floor_key(module: str) -> str | None:
    keys = [k for k in FLOORS if module == k or module.startswith(k + ".")]
    return max(keys, key=len, default=None)


def package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def imports_of(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("app.") or node.module == "app":
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("app."))
    return found


MODULES = {module_name(p): p for p in sorted(APP.rglob("*.py"))}


def test_every_module_has_a_floor() -> None:
    # "app" itself matches everything: a module must be named by a key of its own.
    unplaced = [m for m in MODULES if floor_key(m) in (None, "app") and m != "app"]
    assert unplaced == [], "add them to FLOORS"


def allowed(module: str, dependency: str) -> bool:
    if dependency == "app":  # the version, from the package's face
        return True
    mine, theirs = FLOORS[floor_key(module) or "app"], FLOORS[floor_key(dependency) or "app"]
    if theirs < mine:
        return True
    return theirs == mine and (mine == SHARED or package(module) == package(dependency))


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module: str) -> None:
    upward = sorted(d for d in imports_of(MODULES[module]) if not allowed(module, d))
    assert upward == [], f"{module} imports from its own floor or above"


def test_an_upward_import_is_caught() -> None:
    # The rule itself: the relay may not reach into admission, nor flight into
    # the pipeline that runs it.
    assert not allowed("app.relay.stream", "app.admission.base")
    assert not allowed("app.request.flight", "app.request.pipeline")
    assert allowed("app.request.pipeline", "app.request.flight")
