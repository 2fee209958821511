"""The rounds' summary (loadtests/rounds.py, loadtests/rounds_page.py) on
synthetic runs: medians with their min–max, ratios paired within a round,
the marks against direct's own band, and each class's misses summed."""

import json
from pathlib import Path
from typing import Any

import pytest

from loadtests.rounds import Round, aggregate, rotated, spread
from loadtests.rounds_page import load_rounds, write_rounds


def run(
    tokens: list[float],
    p99: list[float | None],
    classes: list[dict[str, dict[str, Any]]] | None = None,
    users: tuple[int, ...] = (1, 16),
) -> dict[str, Any]:
    """A run's summary.json as far as the rounds read it."""
    stages = [
        {"start": 10.0 * i, "end": 10.0 * (i + 1), "users": u, "spawn_rate": u}
        for i, u in enumerate(users)
    ]
    steps = [
        {"users": u, "tokens_per_s": t, "ttft_p50": None if q is None else q / 2, "ttft_p99": q}
        for u, t, q in zip(users, tokens, p99, strict=True)
    ]
    return {"meta": {"stages": stages}, "steps": steps, "classes": classes or []}


def one(
    direct: tuple[float, float], again: tuple[float, float], gateway: tuple[float, float]
) -> Round:
    """A round of one step (16 users): each target's (tokens/s, TTFT p99)."""
    return {
        name: run([tokens], [p99], users=(16,))
        for name, (tokens, p99) in (("direct", direct), ("again", again), ("gateway", gateway))
    }


def test_each_target_is_the_median_of_the_rounds_with_their_min_and_max() -> None:
    rounds = [
        one((100, 1.0), (110, 1.1), (90, 1.2)),
        one((200, 2.0), (190, 1.9), (180, 2.1)),
        one((150, 1.5), (140, 1.4), (160, 1.3)),
    ]
    (step,) = aggregate(rounds)
    tokens = step.tokens["gateway"]
    assert tokens is not None
    assert (tokens.median, tokens.low, tokens.high) == (160, 90, 180)
    p99 = step.ttft_p99["direct"]
    assert p99 is not None
    assert (p99.median, p99.low, p99.high) == (1.5, 1.0, 2.0)


def test_ratios_are_paired_within_each_round_not_taken_of_the_medians() -> None:
    # Each round's gateway over that round's direct: 1.2, 0.5, 1.0. The
    # medians' ratio (150 / 200) or any unpaired pick would say otherwise.
    rounds = [
        one((100, 1.0), (100, 1.0), (120, 1.0)),
        one((300, 1.0), (300, 1.0), (150, 1.0)),
        one((200, 1.0), (300, 1.0), (200, 1.0)),
    ]
    (step,) = aggregate(rounds)
    ratio = step.tokens_ratio["gateway"]
    assert ratio is not None
    assert (ratio.median, ratio.low, ratio.high) == pytest.approx((1.0, 0.5, 1.2))
    again = step.tokens_ratio["again"]
    assert again is not None
    assert (again.median, again.high) == pytest.approx((1.0, 1.5))


def test_the_gateway_is_marked_slower_only_below_direct_agains_lowest() -> None:
    inside = [one((100, 1.0), (95, 1.0), (96, 1.0)), one((100, 1.0), (105, 1.0), (97, 1.0))]
    (step,) = aggregate(inside)
    assert not step.slower
    below = [one((100, 1.0), (95, 1.0), (90, 1.0)), one((100, 1.0), (105, 1.0), (94, 1.0))]
    (step,) = aggregate(below)
    assert step.slower
    assert step.marks == "slower"


def test_the_gateway_is_marked_later_past_directs_p99_plus_the_band() -> None:
    # The band: the widest gap between direct and direct again in a round (0.3).
    rounds = [one((100, 1.0), (100, 1.3), (100, 1.25)), one((100, 1.0), (100, 0.9), (100, 1.25))]
    (step,) = aggregate(rounds)
    assert step.band_p99 == pytest.approx(0.3)
    assert not step.later
    rounds = [one((100, 1.0), (100, 1.3), (100, 1.35)), one((100, 1.0), (100, 0.9), (100, 1.35))]
    (step,) = aggregate(rounds)
    assert step.later
    assert step.marks == "later"


def test_a_step_with_no_ttft_in_a_round_is_left_out_of_its_spread() -> None:
    assert spread([None, 2.0, 1.0, None]) == spread([1.0, 2.0])
    assert spread([None]) is None


def test_runs_with_other_steps_are_refused() -> None:
    rounds = [one((100, 1.0), (100, 1.0), (100, 1.0))]
    rounds[0]["gateway"] = run([100, 100], [1.0, 1.0], users=(1, 16))
    with pytest.raises(ValueError, match="steps"):
        aggregate(rounds)


def test_each_target_runs_first_second_and_last_in_turn() -> None:
    orders = [rotated(i) for i in range(3)]
    assert orders[0] == ("direct", "again", "gateway")
    for position in range(3):
        assert sorted(order[position] for order in orders) == ["again", "direct", "gateway"]


def classes(chat: tuple[int, float], bulk: tuple[int, float]) -> list[dict[str, dict[str, Any]]]:
    """One step's classes: each (refused, TTFT p99)."""
    return [
        {
            name: {
                "name": name,
                "requests": 10,
                "refused": refused,
                "misses": refused + 1,
                "ttft_p50": p99 / 2,
                "ttft_p99": p99,
            }
            for name, (refused, p99) in (("bulk", bulk), ("chat", chat))
        }
    ]


def test_each_class_has_its_ttft_spread_and_its_refusals_summed() -> None:
    rounds = []
    for refused in (2, 3):
        rnd = one((100, 1.0), (100, 1.0), (100, 1.0))
        rnd["gateway"]["classes"] = classes((0, 0.2 * refused), (refused, 5.0))
        rnd["direct"]["classes"] = classes((0, 3.0), (0, 4.0))
        rnd["again"]["classes"] = classes((0, 3.0), (0, 4.0))
        rounds.append(rnd)
    (step,) = aggregate(rounds)
    assert set(step.classes) == {"bulk", "chat"}
    bulk = step.classes["bulk"]["gateway"]
    assert (bulk.refused, bulk.misses, bulk.requests) == (5, 7, 20)
    chat = step.classes["chat"]["gateway"].ttft_p99
    assert chat is not None
    assert (chat.low, chat.high) == pytest.approx((0.4, 0.6))
    assert step.classes["chat"]["direct"].refused == 0


def folder(tmp_path: Path, rounds: list[Round], planned: int | None = None) -> Path:
    """A rounds folder as benchmarks/showcase_rounds.py writes it."""
    order = [list(rotated(i)) for i in range(planned or len(rounds))]
    plan = {"shape": "classes", "order": order, "direct_priority": True}
    (tmp_path / "rounds.json").write_text(json.dumps(plan))
    for number, runs in enumerate(rounds, start=1):
        for target, summary in runs.items():
            path = tmp_path / f"round-{number}" / target / f"20261207-0000{number}-classes-x"
            path.mkdir(parents=True)
            (path / "summary.json").write_text(json.dumps(summary))
    return tmp_path


def two_steps(tokens: float, chat_p99: float) -> dict[str, Any]:
    step_classes = classes((0, chat_p99), (1, 4.0)) * 2
    return run([tokens, tokens * 2], [0.1, 2.0], step_classes)


def test_the_page_has_the_tables_each_round_and_its_picture(tmp_path: Path) -> None:
    rounds: list[Round] = [
        {"direct": two_steps(100, 3.0), "again": two_steps(104, 3.1), "gateway": two_steps(99, 0.5)}
        for _ in range(2)
    ]
    page = write_rounds(folder(tmp_path, rounds)).read_text()
    assert page.startswith("# Load report: classes in 2 rounds")
    for heading in ("## Throughput (tokens/s)", "## TTFT (s)", "### chat", "## Each round"):
        assert heading in page
    throughput = page.split("## Throughput")[1].split("##")[0]
    assert "| 16 | 200 | 208 | 198 | 1.04× | 0.99× |" in throughput
    each = page.split("## Each round")[1]
    assert each.count("direct → direct again → gateway") == 2  # round 1's order, 2 steps
    assert each.count("direct again → gateway → direct") == 2
    assert "their class's priority in the body" in page
    assert (tmp_path / "classes-rounds.png").stat().st_size > 0
    assert "](classes-rounds.png)" in page
    steps = json.loads((tmp_path / "rounds.json").read_text())["steps"]
    assert [step["users"] for step in steps] == [1, 16]


def test_a_round_that_did_not_run_whole_is_left_out_and_said(tmp_path: Path) -> None:
    whole: Round = {t: two_steps(100, 1.0) for t in ("direct", "again", "gateway")}
    cut: Round = {"direct": two_steps(100, 1.0)}
    plan, rounds = load_rounds(folder(tmp_path, [whole, cut]))
    assert len(plan["order"]) == 2
    assert len(rounds) == 1
    page = write_rounds(tmp_path).read_text()
    assert "in 1 rounds" in page
    assert "1 of 2 rounds did not run whole" in page
