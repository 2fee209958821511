"""Every run a page quotes has its summary under ``results/``, and every
summary its stamp in ``results/measurements.yaml``: the commit it measured,
the date, the command, the machine and the layout — so a figure cannot land
without saying what produced it — and where its raw results are.

The header at the top of a summary and its entry in the manifest say the
same (the summary is what review reads, the manifest what tools read). A
commit is checked against the history where the checkout has it (a fresh
clone does; a shallow one does not, and then only its form is checked), and
so is each legacy run's raw results' commit and path."""

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.summary.page import read_stamp
from tests.docs.pages import has_history, history_references, in_history

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
MANIFEST = RESULTS / "measurements.yaml"
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
COMMIT = re.compile(r"^[0-9a-f]{7,40}$")
STAMPED = ("commit", "date", "command", "machine", "layout", "raw")


def entries() -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = yaml.safe_load(MANIFEST.read_text())["measurements"]
    return listed


def summaries() -> list[str]:
    """Every summary: the Markdown files under results/ but the READMEs."""
    return sorted(
        str(p.relative_to(ROOT))
        for p in RESULTS.glob("**/*.md")
        if p.is_file() and p.name != "README.md"
    )


def test_every_summary_is_stamped_and_every_stamp_has_its_summary() -> None:
    stamped = [e["path"] for e in entries()]
    assert len(stamped) == len(set(stamped)), "a summary stamped twice"
    assert sorted(set(summaries()) - set(stamped)) == [], f"stamp them in {MANIFEST.name}"
    assert sorted(set(stamped) - set(summaries())) == [], "a stamp without its summary"


@pytest.mark.parametrize("entry", entries(), ids=lambda e: e["path"])
def test_a_stamp_says_commit_date_command_machine_and_layout(entry: dict[str, Any]) -> None:
    assert COMMIT.match(str(entry["commit"])), entry
    assert DATE.match(str(entry["date"])), entry
    for field in ("command", "machine", "layout", "raw"):
        assert str(entry.get(field, "")).strip(), (entry["path"], field)


@pytest.mark.parametrize("entry", entries(), ids=lambda e: e["path"])
def test_a_summarys_header_says_what_its_stamp_says(entry: dict[str, Any]) -> None:
    header = read_stamp((ROOT / entry["path"]).read_text())
    assert header is not None, f"{entry['path']}: no stamp under its title"
    for field in STAMPED:
        assert " ".join(str(getattr(header, field)).split()) == " ".join(
            str(entry[field]).split()
        ), (entry["path"], field)


def test_each_commit_and_each_legacy_runs_raw_results_are_in_the_history() -> None:
    if not has_history():
        pytest.skip("a shallow checkout: no history to look in")
    stamps = entries()
    assert [e["commit"] for e in stamps if not in_history(str(e["commit"]))] == []
    references = [ref for e in stamps for ref in history_references(_coded(str(e["raw"])))]
    assert len(references) >= 140  # the legacy runs' raw results, each at its last commit
    assert [f"{c}:{p}" for c, p in references if not in_history(c, p)] == []


def _coded(raw: str) -> str:
    """The stamp's raw-results field as a summary's header writes it (each
    ``git ...`` command in backticks), which is what the references are read from."""
    return ", ".join(f"`{part}`" if part.startswith("git ") else part for part in raw.split(", "))
