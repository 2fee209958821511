"""``make showcase``: re-measure what the showcase shows, at the current commit.

Starts ``make up``'s stack with its defaults (one engine of the tiny model,
the gateway, Prometheus), then runs, in order:

1. the degradation shape under locust straight at vLLM, then through the
   gateway (``make load``), and their comparison (``make load-compare``);
   each run's Degradation dashboard is rendered from that run's own
   Prometheus data, and the gateway run keeps a screenshot of the admin
   port's live page near its end;
2. the course's experiments and the capacity surface
   (``python -m benchmarks.experiments all``) against the same stack;

writes what the docs cite into ``docs/load/`` and ``docs/experiments/``,
each page stamped with the commit, the date and the command, and their
entries in ``docs/measurements.yaml``; then stops the stack. It refuses a
work tree with uncommitted changes: a stamp names the commit measured.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from deploy.local import ROOT, ManagedProcess

COMMAND = "make showcase"
LOAD = ROOT / "docs" / "load"
EXPERIMENTS = ROOT / "docs" / "experiments"
MANIFEST = ROOT / "docs" / "measurements.yaml"
GATEWAY = "http://127.0.0.1:8000"
PROMETHEUS = "http://127.0.0.1:9090"


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


def stamp_page(page: Path, commit: str, date: str) -> None:
    """A line under the page's title: what measured it, where."""
    lines = page.read_text().splitlines()
    line = (
        f"Measured at {commit} ({date}) by `{COMMAND}` against `make up`'s stack with its"
        " defaults (one engine of the tiny model, 24 KV blocks, the gateway as `make up`"
        " sets it)."
    )
    page.write_text("\n".join([lines[0], "", line, *lines[1:]]) + "\n")


def load_runs(scratch: Path, commit: str, date: str, log: Path) -> None:
    for target in ("direct", "gateway"):
        shape = ["--shape", "degradation", "--target", target]
        run_step(["-m", "loadtests.run", *shape, "--out", str(scratch)], log)
    direct = latest(scratch, "degradation-direct")
    gateway = latest(scratch, "degradation-gateway")
    compared = scratch / "compare"
    run_step(["-m", "loadtests.compare", str(direct), str(gateway), "--out", str(compared)], log)
    shutil.rmtree(LOAD, ignore_errors=True)
    LOAD.mkdir(parents=True)
    for name, run in (("direct", direct), ("gateway", gateway)):
        shutil.copy(run / "summary.md", LOAD / f"degradation-{name}.md")
        shutil.copy(run / "summary.json", LOAD / f"degradation-{name}.json")
        dashboard = run / "dashboard-degradation.png"
        if dashboard.exists():
            shutil.copy(dashboard, LOAD / f"dashboard-degradation-{name}.png")
    if (gateway / "live-page.png").exists():
        shutil.copy(gateway / "live-page.png", LOAD / "live-page.png")
    shutil.copy(compared / "compare.md", LOAD / "direct-vs-gateway.md")
    shutil.copy(compared / "compare.png", LOAD / "direct-vs-gateway.png")
    for page in LOAD.glob("*.md"):
        stamp_page(page, commit, date)


def stamp_manifest(manifest_path: Path, commit: str, date: str, took: float) -> None:
    """Replace the two folders' entries in the manifest of measurements."""
    text = manifest_path.read_text()
    manifest = yaml.safe_load(text)
    header = text.split("measurements:", 1)[0]
    kept = [
        entry
        for entry in manifest["measurements"]
        if entry["path"] not in ("docs/load", "docs/experiments")
    ]
    for path, what in (
        ("docs/load", "the degradation shape direct and through the gateway, the dashboards"),
        ("docs/experiments", "the course's experiments and the capacity surface"),
    ):
        kept.append(
            {
                "path": path,
                "commit": commit,
                "date": date,
                "command": COMMAND,
                "note": f"{what}; the whole command took {took / 60:.0f} min",
            }
        )
    kept.sort(key=lambda entry: entry["path"])
    body = yaml.safe_dump({"measurements": kept}, sort_keys=False, allow_unicode=True, width=100)
    manifest_path.write_text(header + body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allow-dirty", action="store_true", help="measure uncommitted code")
    args = parser.parse_args()
    if git("status", "--porcelain", "--untracked-files=no") and not args.allow_dirty:
        print("uncommitted changes: commit first (a stamp names the commit measured)")
        return 2
    commit = git("rev-parse", "--short", "HEAD")
    date = time.strftime("%Y-%m-%d", time.gmtime())
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="showcase-") as tmp:
        scratch = Path(tmp)
        log = scratch / "steps.log"
        env = {"TRACES": "off", "GATEWAYS": "1", "ENGINE_REPLICAS": "1"}
        stack = ManagedProcess("stack", [sys.executable, "deploy/stack.py"], env, scratch)
        try:
            stack.wait_http(f"{GATEWAY}/health/ready", timeout=900)
            stack.wait_http(f"{PROMETHEUS}/-/ready", timeout=60)
            load_runs(scratch, commit, date, log)
            run_step(["-m", "benchmarks.experiments", "all", "--out", str(EXPERIMENTS)], log)
        except (subprocess.CalledProcessError, RuntimeError, TimeoutError):
            print(log.read_text() if log.exists() else "", file=sys.stderr)
            print(stack.log_tail(60), file=sys.stderr)
            raise
        finally:
            stack.stop(timeout=60)
    took = time.monotonic() - started
    stamp_manifest(MANIFEST, commit, date, took)
    print(f"showcase measured at {commit} in {took / 60:.1f} min: docs/load, docs/experiments")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
