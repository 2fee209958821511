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
   (``python -m benchmarks.experiments all``) against the same stack
   (``--load-only``: not);

writes every raw result under ``reports/showcase-<time>/`` (git ignores it),
keeps the pictures the pages show in ``docs/load/`` and
``docs/experiments/`` and the runs' summaries, stamped with the commit, the
date, the command, the machine and the layout, in ``results/load/`` and
``results/experiments/`` (their entries in ``results/measurements.yaml``
replaced); then stops the stack. It refuses a work tree with uncommitted
changes: a stamp names the commit measured.

``--rounds N`` runs the load part in rounds instead
(``benchmarks/showcase_rounds.py``): per round direct, direct again and the
gateway, the order rotated, the steps from 16 users on held longer
(``--long-steps``, 45 s); it keeps the rounds' summary
(``results/load/<shape>-rounds.md``, its picture in ``docs/load/``) and
leaves the single runs' pages as they were. ``--shape classes`` runs two
classes of users (chat and bulk) instead of one, each class's TTFT and
misses in the pages; ``--direct-priority`` has them send their class's
priority to vLLM direct. Without options the showcase runs as it always did.
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
from benchmarks.showcase_rounds import RoundsPlan, add_options, plan_of, run_rounds, wait_idle
from benchmarks.summary.page import Stamp, restamp
from deploy.local import ROOT, ManagedProcess

COMMAND = "make showcase"
PICTURES = ROOT / "docs"
GATEWAY = "http://127.0.0.1:8000"
ENGINE = "http://127.0.0.1:8001"
PROMETHEUS = "http://127.0.0.1:9090"
LAYOUT = (
    "`make up`'s stack: the engine on {cpus}, the gateway on the cores it leaves, Prometheus and"
    " the load client not pinned"
)


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def run_step(argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
    print(f"$ {' '.join(argv)}", flush=True)
    with log.open("ab") as out:
        subprocess.run(
            [sys.executable, *argv], cwd=ROOT, env=env, stdout=out, stderr=out, check=True
        )


def command_of(argv: list[str]) -> str:
    """The command a stamp names: ``make showcase`` and the options it got."""
    return f'{COMMAND} SHOWCASE_ARGS="{" ".join(argv)}"' if argv else COMMAND


def latest(folder: Path, suffix: str) -> Path:
    return max(folder.glob(f"*-{suffix}"), key=lambda path: path.stat().st_mtime)


def showcase_stamp(
    commit: str, date: str, machine: str, note: str, raw: str, command: str = COMMAND
) -> Stamp:
    """The stamp of every page a run keeps (``raw``: where its raw results are)."""
    cpus = os.environ.get("ENGINE_CPUS") or "all but the last core"
    return Stamp(
        commit=commit,
        date=date,
        command=command,
        machine=machine,
        layout=LAYOUT.format(cpus=cpus),
        raw=f"not kept: they stay under {raw}/ on the machine that ran it",
        note=note,
    )


def kept_names(shape: str) -> dict[str, str]:
    """What the single runs of ``shape`` are kept as: the degradation's under
    the names the docs link, another shape's under its own."""
    prefix = "" if shape == "degradation" else f"{shape}-"
    return {
        "direct": f"{shape}-direct",
        "gateway": f"{shape}-gateway",
        "compare": f"{prefix}direct-vs-gateway",
        "live": f"{prefix}live-page",
    }


def load_runs(
    out: Path,
    log: Path,
    shape: str = "degradation",
    options: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> dict[str, Path]:
    """The two load runs and their comparison; each page's picture put
    where the pages show it. Returns each summary page by its kept name."""
    for target in ("direct", "gateway"):
        argv = ["--shape", shape, "--target", target, *options]
        run_step(["-m", "loadtests.run", *argv, "--out", str(out)], log, env)
    direct = latest(out, f"{shape}-direct")
    gateway = latest(out, f"{shape}-gateway")
    compared = out / "compare"
    run_step(["-m", "loadtests.compare", str(direct), str(gateway), "--out", str(compared)], log)
    names = kept_names(shape)
    pictures = PICTURES / "load"
    pictures.mkdir(parents=True, exist_ok=True)
    for target, run in (("direct", direct), ("gateway", gateway)):
        dashboard = run / "dashboard-degradation.png"
        if dashboard.exists():
            shutil.copy(dashboard, pictures / f"dashboard-{shape}-{target}.png")
        classes = run / "ttft-classes.png"
        if classes.exists():
            shutil.copy(classes, pictures / f"{names[target]}-classes.png")
    if (gateway / "live-page.png").exists():
        shutil.copy(gateway / "live-page.png", pictures / f"{names['live']}.png")
    shutil.copy(compared / "compare.png", pictures / f"{names['compare']}.png")
    return {
        names["direct"]: direct / "summary.md",
        names["gateway"]: gateway / "summary.md",
        names["compare"]: compared / "compare.md",
    }


def load_notes(shape: str, took: str) -> dict[str, str]:
    names = kept_names(shape)
    what = f"the {shape} shape" + (" (chat and bulk users)" if shape == "classes" else "")
    return {
        names["direct"]: f"{what} straight to vLLM; {took}",
        names["gateway"]: f"{what} through the gateway; {took}",
        names["compare"]: f"the two {shape} runs side by side; {took}",
    }


def rounds_runs(out: Path, log: Path, plan: RoundsPlan) -> dict[str, Path]:
    """The shape in rounds (its picture goes with its page into docs/)."""

    def run(argv: list[str], env: dict[str, str]) -> None:
        run_step(argv, log, env)

    page = run_rounds(plan, out, run, lambda: wait_idle(ENGINE))
    return {f"{plan.shape}-rounds": page}


def rounds_note(plan: RoundsPlan, took: str) -> str:
    return (
        f"the {plan.shape} shape in {plan.rounds} rounds: vLLM direct, direct again and the"
        f" gateway, alternated; {took}"
    )


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
    parser.add_argument("--load-only", action="store_true", help="no experiments")
    add_options(parser)
    args = parser.parse_args()
    plan = plan_of(args)
    options = tuple(["--direct-priority"] if args.direct_priority else [])
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
        if plan is None:
            load = load_runs(out / "load", log, args.shape, options, single_env(args))
        else:
            load = rounds_runs(out / "rounds", log, plan)
        experiments = out / "experiments"
        if not args.load_only:
            run_step(["-m", "benchmarks.experiments", "all", "--out", str(experiments)], log)
    except (subprocess.CalledProcessError, RuntimeError, TimeoutError):
        print(log.read_text() if log.exists() else "", file=sys.stderr)
        print(stack.log_tail(60), file=sys.stderr)
        raise
    finally:
        stack.stop(timeout=60)
    took = f"the whole command took {(time.monotonic() - started) / 60:.0f} min"
    machine = _machine(before, machine_state())
    raw = str(out.relative_to(ROOT))
    stamp = showcase_stamp(commit, date, machine, took, raw, command_of(sys.argv[1:]))
    if plan is None:
        notes = load_notes(args.shape, took)
    else:
        notes = {name: rounds_note(plan, took) for name in load}
    keep_pages(load, "load", stamp, notes)
    if not args.load_only:
        pages = {page.stem: page for page in sorted(experiments.glob("*.md"))}
        keep_pages(pages, "experiments", stamp, {})
    kept = "results/load" + ("" if args.load_only else ", results/experiments")
    print(f"showcase measured at {commit}: {kept}; raw in {out}")
    return 0


def single_env(args: argparse.Namespace) -> dict[str, str] | None:
    """One run per target: its steps from --long-from users on held
    --long-steps seconds, where asked (None: the schedule's own)."""
    if not args.long_steps:
        return None
    long = {"LOAD_LONG_STEP_SECONDS": f"{args.long_steps:g}", "LOAD_LONG_FROM": str(args.long_from)}
    return {**os.environ, **long}


def _machine(before: MachineState, after: MachineState) -> str:
    return machine_note(before, after).removeprefix("Machine at the start: ").rstrip(".")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
