"""``make showcase`` (benchmarks/showcase.py): it says up front what it
needs, and each page it keeps carries its stamp in results/, the other
runs' stamps left as they were. The run itself starts a whole stack; these
tests start nothing."""

from pathlib import Path

import pytest
import yaml

from benchmarks import showcase, showcase_needs
from benchmarks.summary.page import read_stamp

MANIFEST = """measurements:
- path: results/adapters/burst.md
  commit: 23370e3
  date: '2026-12-03'
  command: make bench-adapters
  machine: 2 CPUs
  layout: two engines
  raw: git archive 96801bc docs/adapters/burst
"""


def test_without_prometheus_it_stops_at_once_naming_the_package(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr("sys.argv", ["showcase"])

    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("the stack was started")

    monkeypatch.setattr(showcase, "ManagedProcess", started)
    monkeypatch.setattr(showcase, "git", started)
    assert showcase.main() == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "`prometheus` (apt-get install prometheus)" in err


def test_what_it_needs_is_checked_before_make_setup_with_no_virtualenv(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `make showcase-needs` runs this module with the system's python3.
    source = Path(showcase_needs.__file__).read_text()
    imported = {
        line.split()[1] for line in source.splitlines() if line.startswith(("import", "from"))
    }
    assert imported == {"shutil", "sys", "loadtests.live_page"}
    monkeypatch.setenv("PATH", "")
    assert showcase_needs.main() == 2
    assert "`prometheus` (apt-get install prometheus)" in capsys.readouterr().err


def test_with_prometheus_on_the_path_nothing_of_it_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = tmp_path / "prometheus"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert not any("prometheus" in need for need in showcase_needs.missing())


def test_each_page_is_kept_stamped_and_the_other_runs_stay(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    (tmp_path / "results/measurements.yaml").write_text(MANIFEST)
    run = tmp_path / "reports/showcase-1/load"
    run.mkdir(parents=True)
    page = run / "summary.md"
    stamp = showcase.showcase_stamp(
        "abc1234", "2026-12-07", "2 cores", "took 12 min", "reports/showcase-1"
    )
    for _ in range(2):  # measured again: the entry is replaced, not added
        page.write_text("# Load report: degradation against gateway\n\n## Steps\n\n| a |\n")
        showcase.keep_pages(
            {"degradation-gateway": page}, "load", stamp, {"degradation-gateway": "x"}, tmp_path
        )
    kept = (tmp_path / "results/load/degradation-gateway.md").read_text()
    header = read_stamp(kept)
    assert header is not None
    assert (header.commit, header.command, header.note) == ("abc1234", showcase.COMMAND, "x")
    assert header.raw.startswith("not kept: they stay under reports/showcase-1/")
    entries = yaml.safe_load((tmp_path / "results/measurements.yaml").read_text())
    paths = [e["path"] for e in entries["measurements"]]
    assert paths == ["results/adapters/burst.md", "results/load/degradation-gateway.md"]
