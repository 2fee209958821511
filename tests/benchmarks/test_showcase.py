"""``make showcase`` (benchmarks/showcase.py): it says up front what it
needs, and each page it keeps carries its stamp in results/, the other
runs' stamps left as they were. The run itself starts a whole stack; these
tests start nothing."""

import argparse
import json
from pathlib import Path

import pytest
import yaml

from benchmarks import showcase, showcase_needs, showcase_rounds
from benchmarks.summary.page import Stamp, read_stamp

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


# --- the rounds (benchmarks/showcase_rounds.py) and the options -----------


def fake_run(calls: list[tuple[list[str], dict[str, str]]]) -> showcase_rounds.Runner:
    """A run that leaves a summary.json where loadtests.run would."""

    def run(argv: list[str], env: dict[str, str]) -> None:
        calls.append((argv, env))
        out = Path(argv[argv.index("--out") + 1]) / "20261207-000000-degradation-x"
        out.mkdir(parents=True)
        steps = [{"users": 16, "tokens_per_s": 100.0, "ttft_p50": 0.1, "ttft_p99": 0.2}]
        summary = {"meta": {"stages": [{"start": 0, "end": 45, "users": 16}]}, "steps": steps}
        (out / "summary.json").write_text(json.dumps(summary))

    return run


def test_each_round_runs_direct_direct_again_and_the_gateway_rotated(tmp_path: Path) -> None:
    calls: list[tuple[list[str], dict[str, str]]] = []
    settled: list[int] = []
    plan = showcase_rounds.RoundsPlan(rounds=3, direct_priority=True)
    page = showcase_rounds.run_rounds(
        plan, tmp_path, fake_run(calls), lambda: settled.append(len(calls))
    )
    outs = [Path(argv[argv.index("--out") + 1]) for argv, _ in calls]
    assert [(o.parent.name, o.name) for o in outs[:4]] == [
        ("round-1", "direct"),
        ("round-1", "again"),
        ("round-1", "gateway"),
        ("round-2", "again"),
    ]
    assert [o.name for o in outs[6:]] == ["gateway", "direct", "again"]
    for argv, env in calls:
        target = argv[argv.index("--target") + 1]
        assert target == ("gateway" if "gateway" in argv[argv.index("--out") + 1] else "direct")
        assert "--no-live-page" in argv
        assert "--direct-priority" in argv
        assert env["LOAD_LONG_STEP_SECONDS"] == "45"
        assert env["LOAD_LONG_FROM"] == "16"
    # Every run starts on an idle engine.
    assert settled == list(range(9))
    assert "in 3 rounds" in page.read_text()


def options(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    showcase_rounds.add_options(parser)
    return parser.parse_args(list(argv))


def test_rounds_hold_the_steps_past_the_knee_longer_unless_told() -> None:
    assert showcase_rounds.plan_of(options()) is None
    plan = showcase_rounds.plan_of(options("--rounds", "5", "--shape", "classes"))
    assert plan == showcase_rounds.RoundsPlan(rounds=5, shape="classes", long_steps=45.0)
    unlong = showcase_rounds.plan_of(options("--rounds", "2", "--long-steps", "0"))
    assert unlong is not None
    assert unlong.env() == {}


def test_the_stamp_names_the_options_it_ran_with() -> None:
    assert showcase.command_of([]) == "make showcase"
    assert showcase.command_of(["--rounds", "5"]) == 'make showcase SHOWCASE_ARGS="--rounds 5"'


def test_the_degradation_keeps_the_names_the_docs_link_and_classes_its_own() -> None:
    assert showcase.kept_names("degradation") == {
        "direct": "degradation-direct",
        "gateway": "degradation-gateway",
        "compare": "direct-vs-gateway",
        "live": "live-page",
    }
    assert set(showcase.load_notes("classes", "took 1 min")) == {
        "classes-direct",
        "classes-gateway",
        "classes-direct-vs-gateway",
    }


class Stack:
    def __init__(self, *args: object) -> None:
        pass

    def wait_http(self, *args: object, **kwargs: object) -> None:
        pass

    def stop(self, *args: object, **kwargs: object) -> None:
        pass


def run_main(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *argv: str
) -> tuple[list[list[str]], list[tuple[dict[str, Path], str, Stamp, dict[str, str]]]]:
    """``showcase.main`` with the stack, the runs and the keeping faked:
    the steps it ran, and what it kept."""
    steps: list[list[str]] = []
    kept: list[tuple[dict[str, Path], str, Stamp, dict[str, str]]] = []
    monkeypatch.setattr("sys.argv", ["showcase", *argv])
    monkeypatch.setattr(showcase, "ROOT", tmp_path)
    monkeypatch.setattr(showcase, "missing", lambda: [])
    monkeypatch.setattr(showcase, "git", lambda *a: "" if a[0] == "status" else "abc1234")
    monkeypatch.setattr(showcase, "ManagedProcess", Stack)
    monkeypatch.setattr(showcase, "machine_state", lambda: None)
    monkeypatch.setattr(showcase, "_machine", lambda *a: "2 cores")
    monkeypatch.setattr(showcase, "run_step", lambda argv, *a: steps.append(argv))
    monkeypatch.setattr(showcase, "keep_pages", lambda *a: kept.append(a))
    monkeypatch.setattr(
        showcase, "load_runs", lambda out, log, shape, *a: {f"{shape}-direct": out / "d.md"}
    )
    monkeypatch.setattr(
        showcase, "rounds_runs", lambda out, log, plan: {f"{plan.shape}-rounds": out / "r.md"}
    )
    assert showcase.main() == 0
    return steps, kept


def test_in_rounds_it_keeps_the_rounds_summary_under_its_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    steps, kept = run_main(monkeypatch, tmp_path, "--rounds", "2", "--load-only")
    assert steps == []  # --load-only: no experiments
    ((pages, area, stamp, notes),) = kept
    assert (list(pages), area) == (["degradation-rounds"], "load")
    assert stamp.command == 'make showcase SHOWCASE_ARGS="--rounds 2 --load-only"'
    assert "in 2 rounds" in notes["degradation-rounds"]


def test_without_options_it_runs_as_it_did(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    steps, kept = run_main(monkeypatch, tmp_path)
    assert [argv[:3] for argv in steps] == [["-m", "benchmarks.experiments", "all"]]
    assert [(list(k[0]), k[1]) for k in kept] == [
        (["degradation-direct"], "load"),
        ([], "experiments"),
    ]
    assert kept[0][2].command == "make showcase"
    assert kept[0][3]["degradation-direct"].startswith("the degradation shape straight to vLLM")
