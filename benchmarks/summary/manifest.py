"""``results/measurements.yaml``: one entry per kept summary, with the stamp
its header carries and where the run's raw results are."""

from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from benchmarks.summary.page import Stamp

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
MANIFEST = RESULTS / "measurements.yaml"
HEADER = """\
# One entry per summary under results/: the commit the run measured, the
# date, the command, the machine and the layout (as the summary's own header
# says them), and where the run's raw results are: for runs kept before raw
# results left the tree, the commit that still holds them (`git show
# <commit>:<path>`, or `git archive <commit> <folder>` for a folder); for
# later runs, "not kept". `python -m benchmarks.keep` appends to it;
# tests/benchmarks/test_measurements.py checks it against the summaries.
"""


def entry(path: str, stamp: Stamp) -> dict[str, Any]:
    fields = {k: v for k, v in asdict(stamp).items() if v}
    return {"path": path, **fields}


def read(manifest: Path = MANIFEST) -> list[dict[str, Any]]:
    if not manifest.exists():
        return []
    listed: list[dict[str, Any]] = yaml.safe_load(manifest.read_text())["measurements"] or []
    return listed


def write(entries: list[dict[str, Any]], manifest: Path = MANIFEST) -> None:
    """The entries sorted by path, under the file's header."""
    ordered = sorted(entries, key=lambda e: str(e["path"]))
    body = yaml.safe_dump({"measurements": ordered}, sort_keys=False, allow_unicode=True, width=100)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(HEADER + body)


def put(new: list[dict[str, Any]], manifest: Path = MANIFEST) -> None:
    """Add ``new`` entries, replacing any with the same path."""
    paths = {e["path"] for e in new}
    write([e for e in read(manifest) if e["path"] not in paths] + new, manifest)
