"""docs/ holds pages and pictures only, and stays small; a run's summary in
results/ stays small enough to read in review. Raw results (logs, JSON,
archives, profiles, patches of tried code) live under reports/, which git
ignores, and in the history for the runs kept before (results/README.md)."""

from pathlib import Path

from tests.docs.pages import DOCS, RESULTS, ROOT

PAGES_AND_PICTURES = {".md", ".png", ".svg"}
DOCS_MAX_BYTES = 3 * 1024 * 1024
FILE_MAX_BYTES = 1024 * 1024
SUMMARY_MAX_BYTES = 50_000


def files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def summaries() -> list[Path]:
    """Every summary: the Markdown files under results/ but the READMEs."""
    return [p for p in files(RESULTS) if p.suffix == ".md" and p.name != "README.md"]


def test_docs_holds_pages_and_pictures_only() -> None:
    other = [str(p.relative_to(ROOT)) for p in files(DOCS) if p.suffix not in PAGES_AND_PICTURES]
    assert other == [], "raw results go under reports/ (results/README.md)"


def test_docs_stays_small() -> None:
    total = sum(p.stat().st_size for p in files(DOCS))
    assert total < DOCS_MAX_BYTES, f"docs/ holds {total / 2**20:.1f} MiB"


def test_no_file_under_docs_is_large() -> None:
    large = [str(p.relative_to(ROOT)) for p in files(DOCS) if p.stat().st_size > FILE_MAX_BYTES]
    assert large == []


def test_every_summary_reads_in_review() -> None:
    assert summaries(), "results/ has no summary"
    large = [
        f"{p.relative_to(ROOT)}: {p.stat().st_size:,} bytes"
        for p in summaries()
        if p.stat().st_size > SUMMARY_MAX_BYTES
    ]
    assert large == []
