"""``make showcase``: re-measure what the showcase shows, at the current commit.

First checks that the machine has what it needs beyond ``make setup``
(``benchmarks.showcase_needs``: Prometheus, chromium) and stops at once,
naming what is missing and the package that gives it. Then starts ``make
up``'s stack with its defaults (one engine of the tiny model, the gateway,
Prometheus) and runs, in order:

1. the degradation shape under locust straight at vLLM, then through the
   gateway (``make load``), and their comparison (``make load-compare``);
   each run's Degradation dashboard is rendered from that run's own
   Prometheus data, and the gateway run keeps a screenshot of the admin
   port's live page near its end;
2. the course's experiments and the capacity surface
   (``python -m benchmarks.experiments all``) against the same stack;

writes every raw result under ``reports/showcase-<time>/`` (git ignores it),
keeps the pictures the pages show in ``docs/load/`` and
``docs/experiments/`` and the runs' summaries, stamped with the commit, the
date, the command, the machine and the layout, in ``results/load/`` and
``results/experiments/`` (their entries in ``results/measurements.yaml``
replaced); then stops the stack. It refuses a work tree with uncommitted
changes: a stamp names the commit measured.
"""

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.harness import MachineState, machine_note, machine_state
from benchmarks.keep import keep
from benchmarks.showcase_needs import missing
from benchmarks.summary.page import Stamp, restamp
from deploy.local import ROOT, ManagedProcess

COMMAND = "make showcase"
PICTURES = ROOT / "docs"
GATEWAY = "http://127.0.0.1:8000"
PROMETHEUS = "http://127.0.0.1:9090"
LAYOUT = (
    "`make up`'s stack: the engine on {cpus}, the gateway on the cores it leaves, Prometheus and"
    " the load client not pinned"
)
LOAD_PAGES = {
    "degradation-direct": "the degradation shape straight to vLLM",
    "degradation-gateway": "the degradation shape through the gateway",
    "direct-vs-gateway": "the two degradation runs side by side",
}


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def run_step(argv: list[str], log: Path) -> None:
    print(f"$ {' '.join(argv)}", flush=True)
    with log.open("ab") as out:
        subprocess.run([sys.executable, *argv], cwd=ROOT, stdout=out, stderr=out, check=True)


def latest(folder: Path, suffix: str) -> Path:
    return max(folder.glob(f"*-{suffix}"), key=lambda path: path.stat().st_mtime)


def showcase_stamp(commit: str, date: str, machine: str, note: str, raw: str) -> Stamp:
    """The stamp of every page a run keeps (``raw``: where its raw results are)."""
    cpus = os.environ.get("ENGINE_CPUS") or "all but the last core"
    return Stamp(
        commit=commit,
        date=date,
        command=COMMAND,
        machine=machine,
        layout=LAYOUT.format(cpus=cpus),
        raw=f"not kept: they stay under {raw}/ on the machine that ran it",
        note=note,
    )


def load_runs(out: Path, log: Path) -> dict[str, Path]:
    """The two load runs and their comparison; each page's picture put
    where the pages show it. Returns each summary page by its kept name."""
    for target in ("direct", "gateway"):
        shape = ["--shape", "degradation", "--target", target]
        run_step(["-m", "loadtests.run", *shape, "--out", str(out)], log)
    direct = latest(out, "degradation-direct")
    gateway = latest(out, "degradation-gateway")
    compared = out / "compare"
    run_step(["-m", "loadtests.compare", str(direct), str(gateway), "--out", str(compared)], log)
    pictures = PICTURES / "load"
    pictures.mkdir(parents=True, exist_ok=True)
    for name, run in (("direct", direct), ("gateway", gateway)):
        dashboard = run / "dashboard-degradation.png"
        if dashboard.exists():
            shutil.copy(dashboard, pictures / f"dashboard-degradation-{name}.png")
    if (gateway / "live-page.png").exists():
        shutil.copy(gateway / "live-page.png", pictures / "live-page.png")
    shutil.copy(compared / "compare.png", pictures / "direct-vs-gateway.png")
    return {
        "degradation-direct": direct / "summary.md",
        "degradation-gateway": gateway / "summary.md",
        "direct-vs-gateway": compared / "compare.md",
    }


def keep_pages(
    pages: dict[str, Path], area: str, stamp: Stamp, notes: dict[str, str], root: Path = ROOT
) -> None:
    """Each page stamped and kept as ``results/<area>/<name>.md`` (its
    pictures into ``docs/<area>/``), replacing the run kept before."""
    for name, page in pages.items():
        page.write_text(restamp(page.read_text(), stamp))
        note = notes.get(name, stamp.note)
        kept = keep(page, f"results/{area}/{name}", note=note, replace=True, root=root)
        print(f"kept {kept.relative_to(root)}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--allow-dirty", action="store_true", help="measure uncommitted code")
    args = parser.parse_args()
    lacking = missing()
    if lacking:
        print(f"make showcase needs {'; '.join(lacking)}", file=sys.stderr)
        return 2
    if git("status", "--porcelain", "--untracked-files=no") and not args.allow_dirty:
        print("uncommitted changes: commit first (a stamp names the commit measured)")
        return 2
    commit = git("rev-parse", "--short", "HEAD")
    date = time.strftime("%Y-%m-%d", time.gmtime())
    out = ROOT / "reports" / f"showcase-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    out.mkdir(parents=True)
    log = out / "steps.log"
    started, before = time.monotonic(), machine_state()
    env = {"TRACES": "off", "GATEWAYS": "1", "ENGINE_REPLICAS": "1"}
    stack = ManagedProcess("stack", [sys.executable, "deploy/stack.py"], env, out)
    try:
        stack.wait_http(f"{GATEWAY}/health/ready", timeout=900)
        stack.wait_http(f"{PROMETHEUS}/-/ready", timeout=60)
        load = load_runs(out / "load", log)
        experiments = out / "experiments"
        run_step(["-m", "benchmarks.experiments", "all", "--out", str(experiments)], log)
    except (subprocess.CalledProcessError, RuntimeError, TimeoutError):
        print(log.read_text() if log.exists() else "", file=sys.stderr)
        print(stack.log_tail(60), file=sys.stderr)
        raise
    finally:
        stack.stop(timeout=60)
    took = f"the whole command took {(time.monotonic() - started) / 60:.0f} min"
    machine = _machine(before, machine_state())
    stamp = showcase_stamp(commit, date, machine, took, str(out.relative_to(ROOT)))
    keep_pages(load, "load", stamp, {k: f"{v}; {took}" for k, v in LOAD_PAGES.items()})
    pages = {page.stem: page for page in sorted(experiments.glob("*.md"))}
    keep_pages(pages, "experiments", stamp, {})
    print(f"showcase measured at {commit}: results/load, results/experiments; raw in {out}")
    return 0


def _machine(before: MachineState, after: MachineState) -> str:
    return machine_note(before, after).removeprefix("Machine at the start: ").rstrip(".")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
