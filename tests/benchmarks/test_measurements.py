"""Every measured file under ``docs/`` carries a stamp (``docs/measurements.yaml``):
the commit it was measured at, the date, the command — so a figure cannot
land without saying what produced it.

Measured files are everything in ``docs/``'s folders (raw results, report
pages, plots, logs), but for the ``README.md`` indexes of the runs beside them.
A commit is checked against the history where the checkout has it (a fresh
clone does; a shallow one does not, and then only its form is checked), and
against what the raw results recorded where they recorded one."""

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "docs" / "measurements.yaml"
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
COMMIT = re.compile(r"^[0-9a-f]{7,40}$")


def entries() -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = yaml.safe_load(MANIFEST.read_text())["measurements"]
    return listed


def measured_files() -> list[str]:
    return sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "docs").glob("*/**/*")
        if p.is_file() and p.name != "README.md"
    )


def stamp_of(path: str, stamps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The entry covering ``path``: the longest that is its folder or its
    name without the extension."""
    covering = [
        e for e in stamps if path.startswith(e["path"] + "/") or path.startswith(e["path"] + ".")
    ]
    return max(covering, key=lambda e: len(e["path"]), default=None)


def test_every_measured_file_is_stamped() -> None:
    stamps = entries()
    unstamped = [path for path in measured_files() if stamp_of(path, stamps) is None]
    assert unstamped == [], f"add them to {MANIFEST.relative_to(ROOT)}"
    # And no entry stamps nothing (a run moved or deleted).
    used = {id(stamp_of(path, stamps)) for path in measured_files()}
    assert [e["path"] for e in stamps if id(e) not in used] == []


@pytest.mark.parametrize("entry", entries(), ids=lambda e: e["path"])
def test_a_stamp_says_commit_date_and_command(entry: dict[str, Any]) -> None:
    assert COMMIT.match(entry["commit"]), entry
    assert DATE.match(str(entry["date"])), entry
    assert entry["command"].strip(), entry


def _history() -> bool:
    """Whether this checkout has the history to look commits up in."""
    try:
        shallow = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except OSError:
        return False
    return shallow.returncode == 0 and shallow.stdout.strip() == "false"


def test_each_commit_is_in_the_history_and_is_the_one_its_results_recorded() -> None:
    stamps = entries()
    if _history():
        missing = [
            e["commit"]
            for e in stamps
            if subprocess.run(
                ["git", "-C", str(ROOT), "cat-file", "-e", e["commit"] + "^{commit}"],
                capture_output=True,
                timeout=30,
            ).returncode
            != 0
        ]
        assert missing == []
    recorded = 0
    for raw in (ROOT / "docs").glob("*/**/*.json"):
        result = json.loads(raw.read_text())
        if not isinstance(result, dict) or "gateway_commit" not in result:
            continue
        stamp = stamp_of(str(raw.relative_to(ROOT)), stamps)
        assert stamp is not None
        assert str(result["gateway_commit"]).split()[0] == stamp["commit"], raw
        recorded += 1
    assert recorded >= 30  # the benchmarks' raw results do record theirs
