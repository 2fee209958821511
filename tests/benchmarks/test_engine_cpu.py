"""The overload benchmark's split of the engine's cores: parsing the CPU list,
reading /proc/stat's busy columns, and the split over a stretch of readings."""

import os
import subprocess
import sys
import time

from benchmarks.harness.machine import tree
from benchmarks.overhead.engine_cpu import (
    WORKER,
    EngineCpu,
    Reading,
    busy_seconds,
    command_name,
    raw,
    split,
    switches,
)

TICK = os.sysconf("SC_CLK_TCK")

STAT = """cpu  100 50 30 1000 9 3 2 1 0 0
cpu0 10 20 30 400 7 1 2 3 0 0
cpu1 40 5 6 500 8 0 0 0 0 0
intr 12345
"""


def test_busy_counts_every_column_but_idle_and_iowait_of_the_cores_named() -> None:
    # cpu0: user 10 + nice 20 + system 30 + irq 1 + softirq 2 + steal 3.
    assert busy_seconds({0}, STAT) == 66 / TICK
    assert busy_seconds({0, 1}, STAT) == (66 + 51) / TICK
    # The all-cores line is not a core.
    assert busy_seconds(set(), STAT) == 0


def test_the_split_is_taken_between_the_readings_within_the_stretch() -> None:
    readings = [
        Reading(0.0, api=1.0, tree=3.0, cores=3.5, core_gave_up=5, core_preempted=1),
        Reading(1.0, api=1.2, tree=3.9, cores=4.5, core_gave_up=10, core_preempted=3),
        Reading(2.0, api=1.5, tree=4.8, cores=5.5, core_gave_up=40, core_preempted=7),
        Reading(3.0, api=9.0, tree=9.0, cores=9.0, core_gave_up=90, core_preempted=9),
    ]
    got = split(readings, 0.5, 2.5)
    # From the reading at 1.0 to the one at 2.0: the API server 0.3 s, the
    # rest of the tree 0.6 s, and the cores were busy 0.1 s beyond the tree.
    assert got is not None
    assert got["wall_s"] == 1.0
    assert got["api_s"] == 0.3
    assert got["core_s"] == 0.6
    assert got["others_s"] == 0.1
    assert (got["core_gave_up"], got["core_preempted"]) == (30, 4)
    assert split(readings, 0.5, 1.5) is None


def test_a_busy_child_shows_as_the_engine_core_not_the_api_server() -> None:
    # A parent that idles, with a child that spins: the tree's CPU is the
    # child's, and the parent's own stays near nothing.
    # The child names itself as vLLM names its model workers.
    spin = (
        "import time\nopen('/proc/self/comm', 'w').write('VLLM::Worker')\n"
        "end = time.process_time() + 1.0\nwhile time.process_time() < end: pass\n"
    )
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys; subprocess.run([sys.executable, '-c', {spin!r}])",
        ]
    )
    try:
        # The engine's processes are found once, at the start: wait for the
        # child, named.
        deadline = time.monotonic() + 60
        while not any(command_name(pid) == WORKER for pid in tree(parent.pid)):
            assert time.monotonic() < deadline, "the child never started"
            time.sleep(0.01)
        cpu = EngineCpu(parent.pid, {0})
        with cpu:
            parent.wait(timeout=120)
        # Readings taken while the child spun (it leaves the tree when it ends).
        during = [r for r in cpu.readings if r.tree - r.api > 0.2]
        assert during, "no reading saw the child spin"
        assert all(r.api < 0.2 for r in during)
        # And as the engine's model worker.
        assert all(r.workers > 0.2 for r in during)
    finally:
        parent.kill()
        parent.wait()


def test_switches_count_every_thread_of_a_process() -> None:
    voluntary, involuntary = switches(os.getpid())
    assert voluntary + involuntary > 0
    # A process that has gone counts nothing.
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert switches(gone.pid) == (0, 0)


def test_raw_readings_count_from_the_first_and_from_t0() -> None:
    readings = [
        Reading(10.0, api=1.0, tree=3.0, cores=3.5, core_gave_up=5, core_preempted=1),
        Reading(10.1, api=1.05, tree=3.2, cores=3.75, core_gave_up=9, core_preempted=2),
    ]
    assert raw(readings, 9.95) == [
        [0.05, 0.0, 0.0, 0.0, 0, 0, 0.0],
        [0.15, 0.05, 0.2, 0.25, 4, 1, 0.0],
    ]
    assert raw([], 0.0) == []
