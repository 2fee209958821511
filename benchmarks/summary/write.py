"""A run's summary from what the run wrote (``result.json`` and its
tables): the stamp taken from the result, the tables as the benchmark
rendered them, each round beside them."""

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.summary.kinds import KINDS, kind_of
from benchmarks.summary.page import MAX_BYTES, SUMMARY_NAME, Stamp, page

Record = dict[str, Any]

# The benchmarks `make` runs, by module: a summary shows the command a user types.
MAKE_TARGETS = {
    "benchmarks.admission": "bench",
    "benchmarks.overhead": "bench-overhead",
    "benchmarks.limits": "bench-limits",
    "benchmarks.prefix": "bench-prefix",
    "benchmarks.adapters": "bench-adapters",
    "benchmarks.shared_state": "bench-shared-state",
}
NOT_KEPT = "not kept: they stay under reports/ on the machine that ran it"


def shown_command(argv: Sequence[str]) -> str:
    """The command that ran a benchmark, as a user would type it: its `make`
    target with ``BENCH_ARGS`` where it has one, else ``python -m ...``.
    ``argv`` is the interpreter's own command line (``sys.orig_argv``)."""
    args = list(argv)
    if "-m" in args:
        module = args[args.index("-m") + 1]
        rest = args[args.index("-m") + 2 :]
    else:
        module, rest = Path(args[1]).stem if len(args) > 1 else "?", args[2:]
    target = MAKE_TARGETS.get(module)
    if target is None:
        return shlex.join(["python", "-m", module, *rest])
    if not rest:
        return f"make {target}"
    return f'make {target} BENCH_ARGS="{shlex.join(rest)}"'


def machine_text(result: Record) -> str:
    """The machine at the start and at the end, as the run recorded it."""

    def state(m: Record) -> str:
        return (
            f"load average {m.get('loadavg', '?')}, {m.get('engines', '?')} vLLM engine(s)"
            f" running, {m.get('test_runs', '?')} test run(s)"
        )

    start, end = result.get("machine") or {}, result.get("machine_after") or {}
    text = f"{start.get('cpus', '?')} CPUs; at the start {state(start)}"
    if end:
        text += f"; at the end {state(end)}"
    quiet = result.get("quiet") or {}
    if quiet.get("others"):
        text += f"; others beside it used {quiet.get('others_cores', '?')} cores"
    return text


def commit_of(result: Record) -> tuple[str, str]:
    """The commit the gateway was measured at, and a note when its ``app/``
    had changes of its own (``source_commit`` writes both in one string)."""
    recorded = str(result.get("gateway_commit") or "?")
    dirty = "uncommitted changes in app/" if "+uncommitted" in recorded else ""
    return recorded.split()[0], dirty


def stamp_of(result: Record, command: str, raw: str = NOT_KEPT, note: str = "") -> Stamp:
    commit, dirty = commit_of(result)
    kind = KINDS[kind_of(result)]
    utc = str((result.get("machine") or {}).get("utc", "?"))
    return Stamp(
        commit=commit,
        date=utc[:10],
        command=command,
        machine=machine_text(result),
        layout=kind.layout(result),
        raw=raw,
        note="; ".join(n for n in (note, dirty) if n),
    )


def summary(title: str, result: Record, tables: str, stamp: Stamp, notes: str = "") -> str:
    kind = KINDS[kind_of(result)]
    sections = [("Tables", kind.tables(tables))]
    if notes:
        sections.insert(0, ("Notes", notes))
    sections += kind.rounds(result)
    return page(title, stamp, sections)


def write_summary(out: Path, name: str, result: Record, tables: str) -> Path:
    """``summary.md`` beside a run's raw results (``run_benchmark`` calls
    this); ``python -m benchmarks.keep`` copies it into ``results/``."""
    command = shown_command(getattr(sys, "orig_argv", sys.argv))
    text = summary(f"{name}: {out.name}", result, tables, stamp_of(result, command))
    path = out / SUMMARY_NAME
    path.write_text(text)
    if len(text.encode()) > MAX_BYTES:
        print(f"{path} is over {MAX_BYTES:,} bytes: too large to keep as it is", file=sys.stderr)
    return path
