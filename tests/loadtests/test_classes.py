"""Each step per class (loadtests/classes.py) and the report's section for
it (loadtests/report.py), on synthetic runs: a refusal is a miss, so is a
request served after its objective; TTFT is over the requests served."""

import json
from pathlib import Path
from typing import Any

from loadtests.classes import class_step, class_steps
from loadtests.report import write_report
from loadtests.schedule import Stage


def record(
    user: str, status: int = 200, ttft: float | None = 0.1, start: float = 1.0, **more: Any
) -> dict[str, Any]:
    return {
        "user": user,
        "start": start,
        "end": start + 1,
        "status": status,
        "ttft": ttft if status == 200 else None,
        "itl": 0.01,
        "tokens": 24,
        "abandoned": False,
        "error": None,
        **more,
    }


def test_refused_requests_are_misses_and_not_in_the_ttft() -> None:
    step = class_step("bulk", [record("bulk", ttft=2.0), record("bulk", 429), record("bulk", 503)])
    assert (step.requests, step.served, step.refused, step.misses) == (3, 1, 2, 2)
    assert step.ttft_p99 == 2.0


def test_served_after_its_objective_is_a_miss() -> None:
    records = [record("chat", ttft=0.2, slo=0.5), record("chat", ttft=0.9, slo=0.5)]
    step = class_step("chat", records)
    assert (step.served, step.late, step.misses, step.objective) == (2, 1, 1, 0.5)
    # Without an objective nothing is late.
    assert class_step("chat", [record("chat", ttft=9.0)]).misses == 0


def test_a_broken_stream_or_an_error_is_a_failure() -> None:
    records = [record("chat", error="ReadError()"), record("chat", 500), record("chat", ttft=None)]
    step = class_step("chat", records)
    assert (step.served, step.failed, step.misses) == (0, 3, 3)
    assert step.ttft_p50 is None


def test_each_step_counts_the_requests_its_users_started_per_class() -> None:
    stages = [Stage(0, 10, 1, 1), Stage(10, 20, 2, 2)]
    records = [
        record("chat", start=100.5),
        record("bulk", start=105.0, ttft=1.0),
        record("bulk", 429, start=111.0),
        record("chat", start=119.9, ttft=0.3),
    ]
    steps = class_steps(stages, 100.0, records)
    assert [sorted(step) for step in steps] == [["bulk", "chat"], ["bulk", "chat"]]
    assert steps[0]["bulk"].ttft_p50 == 1.0
    assert steps[1]["bulk"].refused == 1
    assert steps[1]["chat"].ttft_p50 == 0.3
    assert steps[1]["bulk"].as_dict()["misses"] == 1


def run_folder(tmp_path: Path, users: list[str]) -> Path:
    """A run's folder as loadtests.run leaves it, with no samples."""
    stages = [{"start": 0.0, "end": 10.0, "users": 2, "spawn_rate": 2.0}]
    meta = {
        "shape": "classes",
        "target": "gateway",
        "url": "http://127.0.0.1:8000",
        "started": 100.0,
        "started_iso": "2026-12-07 00:00:00 UTC",
        "stages": stages,
        "command": "python -m loadtests.run --shape classes --target gateway",
    }
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    lines = [{"event": "test_start", "t": 100.0}]
    lines += [record(user, start=101.0 + i) for i, user in enumerate(users)]
    lines.append(record(users[-1], 429, start=103.0))
    (tmp_path / "records.jsonl").write_text("\n".join(json.dumps(line) for line in lines))
    return tmp_path


def test_the_report_shows_each_class_where_there_are_two(tmp_path: Path) -> None:
    run = run_folder(tmp_path, ["chat", "bulk"])
    summary = write_report(run)
    page = (run / "summary.md").read_text()
    assert "## Classes" in page
    assert "| 2 | bulk | 2 | 1 | 1 | 0 | 0 | 1 |" in page
    assert (run / "ttft-classes.png").stat().st_size > 0
    assert summary["classes"][0]["bulk"]["refused"] == 1


def test_one_class_keeps_the_report_as_it_was(tmp_path: Path) -> None:
    run = run_folder(tmp_path, ["chat", "chat"])
    write_report(run)
    assert "## Classes" not in (run / "summary.md").read_text()
    assert not (run / "ttft-classes.png").exists()
