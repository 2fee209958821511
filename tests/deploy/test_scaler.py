"""The local scaler (``deploy/scaler.py``): the engine started on the first
held request, kept while anything runs, waits or is held, stopped with its
whole process group once idle. A real engine started by it through a
gateway: ``python -m benchmarks.cold_start``."""

import subprocess
import sys
from pathlib import Path

from app.observe.metrics import GatewayMetrics
from deploy.scaler import BUSY, Demand, Scaler
from tests.support.wait import wait_until


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def running(pid: int) -> bool:
    """Alive, not a zombie waiting for whoever reaps orphans here."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_the_engine_starts_on_a_held_request_and_stops_with_its_group_once_idle(
    tmp_path: Path,
) -> None:
    clock = Clock()
    # A stand-in engine with a child of its own, as vLLM has its engine core.
    pids = tmp_path / "pids"
    command = ["sh", "-c", f"sleep 600 & echo $! > {pids}; wait"]
    scaler = Scaler(command, idle=60.0, stop_timeout=5.0, clock=clock)
    try:
        scaler.step(None)
        scaler.step(Demand(held=0, busy=0))
        assert scaler.engine is None  # nothing held: nothing started
        scaler.step(Demand(held=1, busy=1))
        engine = scaler.engine
        assert engine is not None
        assert wait_until(lambda: pids.exists() and pids.read_text().strip() != "", timeout=30)
        clock.now = 50.0
        scaler.step(Demand(held=0, busy=1))  # served: in use
        clock.now = 109.0
        scaler.step(Demand(held=0, busy=0))
        assert scaler.engine is engine  # 59 s idle: kept
        scaler.step(None)  # no news decides nothing
        clock.now = 110.0
        scaler.step(Demand(held=0, busy=0))
        assert scaler.engine is None
        assert engine.poll() is not None
        assert not running(int(pids.read_text()))  # the engine's own child too
        # The next held request starts it again.
        scaler.step(Demand(held=2, busy=2))
        assert scaler.engine is not None
    finally:
        scaler.stop("the test ended")


def test_an_engine_that_exits_by_itself_is_started_again_when_needed() -> None:
    clock = Clock()
    scaler = Scaler(["true"], idle=60.0, clock=clock)
    try:
        scaler.step(Demand(held=1, busy=1))
        first = scaler.engine
        assert first is not None
        first.wait(timeout=30)
        scaler.step(Demand(held=1, busy=1))
        assert scaler.engine is not None
        assert scaler.engine is not first
    finally:
        scaler.stop("the test ended")


def test_it_reads_the_metrics_the_gateway_exports() -> None:
    families = {family.name for family in GatewayMetrics().registry.collect()}
    assert set(BUSY) <= families


def test_its_command_line_needs_the_engine_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "deploy.scaler", "--metrics", "http://127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 2
    assert "engine's command" in result.stderr
