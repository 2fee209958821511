"""Where the engine's cores went during a stretch of a run: its API server's
CPU, the rest of its tree's (the engine core and its workers) and what
other processes and the kernel took of the same cores, sampled from /proc
every ``PERIOD`` seconds on a thread of its own (the client's event loop is
saturated under overload, and a sample must not wait for it).

Why: behind every relay the burst's first batch decodes 5-10% slower than
direct (docs/benchmarks.md). Either the engine core got less of its cores
(its API server or a floating process took them) or its steps cost more;
the split says which."""

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness.machine import cpu_seconds, tree

PERIOD = 0.1
_CLK_TCK = os.sysconf("SC_CLK_TCK")
# /proc/stat's busy columns: user, nice, system, irq, softirq, steal.
_BUSY = (0, 1, 2, 5, 6, 7)


def busy_seconds(cpus: set[int], stat: str | None = None) -> float:
    """The busy seconds so far of ``cpus`` (every column but idle and
    iowait), from /proc/stat (or ``stat``, its text)."""
    text = Path("/proc/stat").read_text() if stat is None else stat
    wanted = {f"cpu{n}" for n in cpus}
    total = 0
    for line in text.splitlines():
        name, *values = line.split()
        if name in wanted:
            total += sum(int(values[i]) for i in _BUSY if i < len(values))
    return total / _CLK_TCK


# The name vLLM gives its model workers' processes (their comm, as ps shows it).
WORKER = "VLLM::Worker"


def command_name(pid: int) -> str:
    """A process's name (/proc/<pid>/comm; empty once it has gone)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def switches(pid: int) -> tuple[int, int]:
    """The voluntary and involuntary context switches so far of every
    thread of ``pid`` (0, 0 once it has gone)."""
    voluntary = involuntary = 0
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0, 0
    for tid in threads:
        try:
            text = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                voluntary += int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches:"):
                involuntary += int(line.split()[1])
    return voluntary, involuntary


@dataclass(frozen=True)
class Reading:
    at: float
    api: float
    tree: float
    cores: float
    # The engine core's (the tree but the API server) context switches:
    # those it gave the core up for, and those it was preempted at.
    core_gave_up: int = 0
    core_preempted: int = 0
    # The model's workers' (vLLM's VLLM::Worker processes: the forward
    # passes), part of ``tree``; the engine core proper schedules, and waits
    # on them polling.
    workers: float = 0.0


def split(readings: list[Reading], start: float, end: float) -> dict[str, float] | None:
    """Between the readings nearest ``start`` and ``end``: the wall seconds,
    the API server's CPU seconds, the rest of the engine tree's, and the
    others' (the engine's cores busy beyond its tree). None: fewer than two
    readings in that stretch."""
    within = [r for r in readings if start <= r.at <= end]
    if len(within) < 2:
        return None
    first, last = within[0], within[-1]
    api = last.api - first.api
    engine = last.tree - first.tree
    return {
        "wall_s": round(last.at - first.at, 3),
        "api_s": round(api, 3),
        "core_s": round(engine - api, 3),
        "others_s": round(max(0.0, (last.cores - first.cores) - engine), 3),
        "core_gave_up": last.core_gave_up - first.core_gave_up,
        "core_preempted": last.core_preempted - first.core_preempted,
        "workers_s": round(last.workers - first.workers, 3),
    }


def raw(readings: list[Reading], t0: float) -> list[list[float]]:
    """The readings as kept in a result: seconds from ``t0``, then the API
    server's, the tree's and the cores' CPU seconds from the first reading,
    the engine core's context switches from it, and its workers' CPU
    seconds from it (readings kept before the workers were read have six
    columns)."""
    if not readings:
        return []
    first = readings[0]
    return [
        [
            round(r.at - t0, 3),
            round(r.api - first.api, 3),
            round(r.tree - first.tree, 3),
            round(r.cores - first.cores, 3),
            r.core_gave_up - first.core_gave_up,
            r.core_preempted - first.core_preempted,
            round(r.workers - first.workers, 3),
        ]
        for r in readings
    ]


def stretch(rows: list[list[float]], start: float, end: float) -> dict[str, float] | None:
    """``split`` over kept readings (``raw``), between ``start`` and ``end``
    seconds from t=0."""
    readings = [
        Reading(r[0], r[1], r[2], r[3], int(r[4]), int(r[5]), r[6] if len(r) > 6 else 0.0)
        for r in rows
    ]
    return split(readings, start, end)


class EngineCpu:
    """Samples an engine's CPU split while a run lasts (``with`` block)."""

    def __init__(self, pid: int, cpus: set[int], clock: Any = time.perf_counter) -> None:
        self.pid = pid
        self.cpus = cpus
        self.clock = clock
        self.readings: list[Reading] = []
        self._members: set[int] = {pid}
        self._workers: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-cpu", daemon=True)

    def read(self) -> Reading:
        by_pid = cpu_seconds(self._members)
        gave_up = preempted = 0
        for pid in self._members - {self.pid}:
            voluntary, involuntary = switches(pid)
            gave_up += voluntary
            preempted += involuntary
        return Reading(
            self.clock(),
            by_pid.get(self.pid, 0.0),
            sum(by_pid.values()),
            busy_seconds(self.cpus),
            gave_up,
            preempted,
            sum(by_pid.get(pid, 0.0) for pid in self._workers),
        )

    def _run(self) -> None:
        while not self._stop.wait(PERIOD):
            self.readings.append(self.read())

    def __enter__(self) -> "EngineCpu":
        # The engine's processes live as long as it does: found once, not
        # at every reading (a walk of all of /proc).
        self._members = tree(self.pid)
        self._workers = {pid for pid in self._members if command_name(pid).startswith(WORKER)}
        self.readings.append(self.read())
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.readings.append(self.read())
