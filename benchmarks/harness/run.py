"""Running a benchmark: the options every one takes, the quiet-machine wait,
its processes, and its output folder (result.json, tables.md, logs/, and
summary.md: what ``python -m benchmarks.keep`` keeps in git)."""

import argparse
import asyncio
import subprocess
import time
from collections.abc import Callable, Coroutine
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.harness.machine import machine, wait_for_quiet
from benchmarks.harness.processes import Processes
from benchmarks.harness.tables import write_json
from deploy.local import ROOT


def out_dir(name: str, given: str) -> Path:
    """Where a benchmark writes its JSON, tables and logs: ``given``, or
    ``reports/<name>-<UTC time>``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    # Absolute: a gateway run from another source tree has its own working directory.
    path = (Path(given) if given else ROOT / "reports" / f"{name}-{stamp}").resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def source_commit(src: str) -> str:
    """The commit a gateway source tree is at (and ``+changes`` when its
    ``app/`` differs from it)."""
    try:
        head = subprocess.run(
            ["git", "-C", src, "log", "-1", "--format=%h %s"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()[:72]
        dirty = subprocess.run(
            ["git", "-C", src, "status", "--porcelain", "--", "app"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (head or "?") + (" +uncommitted changes in app/" if dirty else "")


def add_common_args(parser: Any) -> None:
    """The options every benchmark takes: which gateway, how long to wait
    for a quiet machine, where to write."""
    parser.add_argument(
        "--gateway-src",
        default=str(ROOT),
        help="the gateway's source tree (default: this repository; e.g. a git worktree)",
    )
    parser.add_argument("--quiet-wait", type=float, default=40.0, help="minutes, at most")
    parser.add_argument("--out", default="", help="folder for result.json, tables, logs")


def benchmark_parser(doc: str) -> argparse.ArgumentParser:
    """A benchmark's command line: described by its docstring's first line,
    with the options every benchmark takes."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_common_args(parser)
    return parser


def run_benchmark(
    name: str,
    args: Any,
    run: Callable[[Processes, Path], Coroutine[Any, Any, dict[str, Any]]],
    render: Callable[[dict[str, Any]], str],
) -> None:
    """Wait for a quiet machine, run ``run`` with its processes (all stopped
    at the end, whatever happens; their logs in ``logs/``), then write
    ``result.json``, ``tables.md`` (what ``render`` makes of the result) and
    ``summary.md`` (the tables, each round and the run's stamp), and print
    the tables."""
    out = out_dir(name, args.out)
    quiet = wait_for_quiet(args.quiet_wait * 60)
    result: dict[str, Any] = {
        "benchmark": name,
        "args": vars(args),
        "machine": machine(),
        "quiet": asdict(quiet),
        "gateway_src": args.gateway_src,
        "gateway_commit": source_commit(args.gateway_src),
    }
    with Processes(out / "logs") as procs:
        result |= asyncio.run(run(procs, out))
    result["machine_after"] = machine()
    write_json(out / "result.json", result)
    text = render(result)
    (out / "tables.md").write_text(text)
    # Imported here: the summaries read the benchmarks' own names, and the
    # benchmarks import this harness.
    from benchmarks.summary.write import write_summary

    summary = write_summary(out, name, result, text)
    print("\n" + text)
    print(f"written to {out}; keep it with: python -m benchmarks.keep {summary.parent} results/...")
