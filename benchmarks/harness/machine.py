"""The machine a benchmark shares: CPU time of process trees from /proc,
other engines and test runs, how quiet it is, what it was like before and
after (for the JSON and for the experiments' pages)."""

import os
import re
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_CLK_TCK = os.sysconf("SC_CLK_TCK")

# --- processes and their CPU time, from /proc --------------------------------------


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (field 3 on)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def _parents() -> dict[int, int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None:
                parents[int(entry)] = int(fields[1])
    return parents


def commands() -> dict[int, str]:
    """Every process's command line (arguments joined by spaces)."""
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                raw = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if raw:
                found[int(entry)] = raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    return found


def tree(pid: int, parents: dict[int, int] | None = None) -> set[int]:
    """``pid`` and every process descended from it."""
    parents = _parents() if parents is None else parents
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    found, todo = {pid}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def cpu_seconds(pids: Iterable[int]) -> dict[int, float]:
    """User + system CPU seconds of each process (all its threads)."""
    out: dict[int, float] = {}
    for pid in pids:
        fields = _stat(pid)
        if fields is not None:
            out[pid] = (int(fields[11]) + int(fields[12])) / _CLK_TCK
    return out


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid``'s process tree (live processes)."""
    return sum(cpu_seconds(tree(pid)).values())


def tree_kernel_cpu(pid: int) -> float:
    """The system part of ``tree_cpu``: seconds the kernel spent on the
    tree's behalf (its sockets' reads, writes and polls). What a relay
    spends beyond it is its own code's."""
    total = 0
    for member in tree(pid):
        fields = _stat(member)
        if fields is not None:
            total += int(fields[12])
    return total / _CLK_TCK


def own_cpu() -> float:
    """CPU seconds of this process (the benchmark's client)."""
    t = os.times()
    return t.user + t.system


# --- other work on the machine ---------------------------------------------------------

OTHERS = re.compile("vllm.entrypoints|pytest")


def foreign() -> dict[int, str]:
    """Engines and test runs that are not this benchmark's (not in this
    process's tree)."""
    mine = tree(os.getpid())
    return {
        pid: command[:160]
        for pid, command in commands().items()
        if pid not in mine and OTHERS.search(command)
    }


class ForeignCpu:
    """CPU that other engines and test runs (their whole process trees) use
    while a measurement runs, in cores."""

    def __init__(self) -> None:
        self.commands: dict[int, str] = {}
        self._start: dict[int, float] = {}
        self._t0 = 0.0

    def _snapshot(self) -> dict[int, float]:
        self.commands |= foreign()
        parents = _parents()
        pids: set[int] = set()
        for pid in self.commands:
            if pid in parents:
                pids |= tree(pid, parents)
        return cpu_seconds(pids)

    def start(self) -> None:
        self.commands = {}
        self._start = self._snapshot()
        self._t0 = time.monotonic()

    def stop(self) -> float:
        now = self._snapshot()
        used = sum(cpu - self._start.get(pid, 0.0) for pid, cpu in now.items())
        return max(0.0, used) / max(1e-9, time.monotonic() - self._t0)


@dataclass
class Quiet:
    """How quiet the machine was before a benchmark began."""

    waited_s: float
    others: list[str]
    others_cores: float
    loadavg: str


def wait_for_quiet(max_wait_s: float, poll_s: float = 60.0, probe_s: float = 10.0) -> Quiet:
    """Wait (polling every ``poll_s``, at most ``max_wait_s``) until no test
    run is going and other engines are idle (their trees use under 5% of a
    core over ``probe_s``); then go on either way and say how it was."""
    started = time.monotonic()
    while True:
        meter = ForeignCpu()
        meter.start()
        if not meter.commands:
            return Quiet(round(time.monotonic() - started), [], 0.0, loadavg())
        time.sleep(probe_s)
        cores = meter.stop()
        busy = cores > 0.05 or any("pytest" in c for c in meter.commands.values())
        others = sorted(set(meter.commands.values()))
        waited = time.monotonic() - started
        if not busy or waited + poll_s > max_wait_s:
            if busy:
                print(f"still busy after {waited / 60:.0f} min; going on", file=sys.stderr)
            return Quiet(round(waited), others, round(cores, 3), loadavg())
        print(
            f"waiting for a quiet machine: {len(others)} other engine/test process(es)"
            f" using {cores:.2f} cores",
            file=sys.stderr,
        )
        time.sleep(poll_s)


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages, as /proc/loadavg has them."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


# --- the machine before and after ------------------------------------------------------


@dataclass
class MachineState:
    """Other work on the machine: on a small box it moves the figures."""

    cores: int
    load_1m: float
    engines: int
    test_runs: int

    def describe(self) -> str:
        return (
            f"{self.cores} cores, load average {self.load_1m:.2f}, {self.engines} vLLM"
            f" engine(s) running on the machine (the measured one included),"
            f" {self.test_runs} pytest run(s)"
        )


def machine_state() -> MachineState:
    running = commands().values()
    try:
        load = float(loadavg().split()[0])
    except (ValueError, IndexError):
        load = float("nan")
    return MachineState(
        cores=os.cpu_count() or 0,
        load_1m=load,
        engines=sum(1 for c in running if "vllm.entrypoints.openai.api_server" in c),
        test_runs=sum(1 for c in running if "-m pytest" in c or "bin/pytest" in c),
    )


def machine_note(before: MachineState, after: MachineState) -> str:
    return f"Machine at the start: {before.describe()}; at the end: {after.describe()}."


def machine() -> dict[str, Any]:
    """The machine and the conditions, for a benchmark's JSON."""
    state = machine_state()
    return {
        "cpus": state.cores,
        "loadavg": loadavg(),
        "engines": state.engines,
        "test_runs": state.test_runs,
        "engine_cpus": os.environ.get("ENGINE_CPUS", "all but the last core (launcher default)"),
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
