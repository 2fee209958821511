"""Keeping a run (``python -m benchmarks.keep``): its summary copied into
``results/``, its stamp into ``results/measurements.yaml``, its pictures
beside the pages; what cannot be kept is refused with the reason. Pure: a
run folder built here, no engine."""

from pathlib import Path

import pytest
import yaml

from benchmarks.keep import NotKept, keep, main
from benchmarks.summary.page import MAX_BYTES, Stamp, page, read_stamp

STAMP = Stamp(
    commit="abc1234",
    date="2026-12-06",
    command="make bench-prefix",
    machine="2 CPUs",
    layout="two engines",
    raw="not kept: they stay under reports/ on the machine that ran it",
)


def run_folder(root: Path, body: str = "| a |\n|---|\n| 1 |") -> Path:
    run = root / "reports" / "prefix-20261206"
    run.mkdir(parents=True)
    (run / "summary.md").write_text(page("prefix: run", STAMP, [("Tables", body)]))
    return run


def test_a_kept_run_is_a_summary_and_a_stamp(tmp_path: Path) -> None:
    run = run_folder(tmp_path)
    kept = keep(run, "results/prefix/held/rag-8", note="what it shows", root=tmp_path)
    assert kept == tmp_path / "results/prefix/held/rag-8.md"
    stamp = read_stamp(kept.read_text())
    assert stamp is not None
    assert stamp.note == "what it shows"
    [entry] = yaml.safe_load((tmp_path / "results/measurements.yaml").read_text())["measurements"]
    assert entry["path"] == "results/prefix/held/rag-8.md"
    assert (entry["commit"], entry["date"], entry["command"]) == (
        "abc1234",
        "2026-12-06",
        "make bench-prefix",
    )
    assert entry["raw"].startswith("not kept")


def test_a_kept_summary_is_not_overwritten_unless_asked(tmp_path: Path) -> None:
    run = run_folder(tmp_path)
    keep(run, "results/prefix/x", root=tmp_path)
    with pytest.raises(NotKept, match="exists"):
        keep(run, "results/prefix/x", root=tmp_path)
    keep(run, "results/prefix/x", replace=True, root=tmp_path)
    entries = yaml.safe_load((tmp_path / "results/measurements.yaml").read_text())
    assert len(entries["measurements"]) == 1


def test_what_cannot_be_kept_is_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(NotKept, match="no summary"):
        keep(tmp_path, "results/prefix/x", root=tmp_path)
    unstamped = tmp_path / "page.md"
    unstamped.write_text("# A load report\n\nno header\n")
    with pytest.raises(NotKept, match="header"):
        keep(unstamped, "results/load/x", root=tmp_path)
    run = run_folder(tmp_path, "x" * (MAX_BYTES + 1))
    with pytest.raises(NotKept, match="bytes"):
        keep(run, "results/prefix/x", root=tmp_path)
    with pytest.raises(NotKept, match="results/<area>/<name>"):
        keep(run, "docs/x", root=tmp_path)


def test_its_pictures_go_beside_the_pages_and_its_links_follow(tmp_path: Path) -> None:
    run = tmp_path / "reports" / "experiments"
    run.mkdir(parents=True)
    (run / "sweep.png").write_bytes(b"png")
    (run / "sweep.md").write_text(page("Sweep", STAMP, [("Sweep", "![sweep](sweep.png)")]))
    kept = keep(run / "sweep.md", "results/experiments/sweep", root=tmp_path)
    assert (tmp_path / "docs/experiments/sweep.png").read_bytes() == b"png"
    assert "![sweep](../../docs/experiments/sweep.png)" in kept.read_text()


def test_the_command_says_why_it_did_not_keep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(tmp_path / "nothing"), "results/prefix/x"]) == 2
    assert "not kept:" in capsys.readouterr().err
