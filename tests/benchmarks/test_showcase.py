"""``make showcase``'s stamps (benchmarks/showcase.py): each page it writes
says what measured it, and the manifest's two entries are replaced, the
rest kept as they were. The run itself starts a whole stack."""

from pathlib import Path

import yaml

from benchmarks.showcase import COMMAND, stamp_manifest, stamp_page

MANIFEST = """# A comment the file keeps.
measurements:
- path: docs/adapters/burst
  commit: 23370e3
  date: '2026-12-03'
  command: make bench-adapters
- path: docs/load
  commit: 3054f93
  date: '2026-11-29'
  command: make load
"""


def test_the_page_says_the_commit_the_date_and_the_command(tmp_path: Path) -> None:
    page = tmp_path / "report.md"
    page.write_text("# Load report\n\nbody\n")
    stamp_page(page, "abc1234", "2026-12-03")
    lines = page.read_text().splitlines()
    assert lines[0] == "# Load report"
    assert lines[2].startswith(f"Measured at abc1234 (2026-12-03) by `{COMMAND}`")
    assert lines[-1] == "body"


def test_the_manifest_gets_the_two_folders_and_keeps_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "measurements.yaml"
    path.write_text(MANIFEST)
    stamp_manifest(path, "abc1234", "2026-12-03", took=1500)
    text = path.read_text()
    assert text.startswith("# A comment the file keeps.\n")
    entries = {e["path"]: e for e in yaml.safe_load(text)["measurements"]}
    assert entries["docs/adapters/burst"]["commit"] == "23370e3"
    for folder in ("docs/load", "docs/experiments"):
        assert entries[folder]["commit"] == "abc1234"
        assert entries[folder]["command"] == COMMAND
        assert "25 min" in entries[folder]["note"]
    assert list(entries) == sorted(entries)
