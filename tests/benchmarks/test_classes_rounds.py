"""Rounds and pairing (``benchmarks.classes.rounds``) and refusals while
the engine had room (``benchmarks.classes.room``). No engine."""

import math

from benchmarks.classes.room import had_room, refusals, state_at
from benchmarks.classes.rounds import Run, across, in_rounds, kind, paired


def run(target: str, r: int, tokens: float, attainment: float) -> Run:
    return {
        "target": target,
        "round": r,
        "kinds": {"total": {"output_tokens": tokens}, "chat": {"attainment": attainment}},
    }


async def test_every_target_runs_once_a_round_in_a_rotated_order() -> None:
    seen: list[tuple[str, int]] = []

    async def one(name: str, r: int) -> Run:
        seen.append((name, r))
        return {}

    runs = await in_rounds(3, ["a", "b", "c"], one)
    assert [n for n, r in seen if r == 0] == ["a", "b", "c"]
    assert [n for n, r in seen if r == 1] == ["b", "c", "a"]
    assert [n for n, r in seen if r == 2] == ["c", "a", "b"]
    assert [(x["target"], x["round"]) for x in runs] == seen


def test_a_ratio_is_paired_with_the_anchor_of_the_same_round() -> None:
    runs = [
        run("direct", 0, 1000, 0.5),
        run("gateway", 0, 900, 0.9),
        run("direct", 1, 500, 0.4),
        run("gateway", 1, 500, 0.9),
    ]
    ratio = paired(runs, "gateway", "direct", kind("total", "output_tokens"))
    assert ratio == {"median": 0.95, "min": 0.9, "max": 1.0}
    points = paired(runs, "gateway", "direct", kind("chat", "attainment"), ratio=False)
    assert points is not None
    assert math.isclose(points["min"], 0.4)
    assert math.isclose(points["max"], 0.5)
    assert across(runs, "direct", kind("total", "output_tokens")) == {
        "median": 750,
        "min": 500,
        "max": 1000,
    }


def test_rounds_without_the_anchor_or_with_an_infinite_figure_are_left_out() -> None:
    runs = [
        {"target": "direct", "round": 0, "kinds": {"chat": {"ttft_p99": math.inf}}},
        {"target": "gateway", "round": 0, "kinds": {"chat": {"ttft_p99": 0.5}}},
        {"target": "gateway", "round": 1, "kinds": {"chat": {"ttft_p99": 0.5}}},
    ]
    assert paired(runs, "gateway", "direct", kind("chat", "ttft_p99")) is None
    assert paired(runs, "gateway", "direct", kind("chat", "ttft_p99"), ratio=False) is None


def test_the_engine_state_at_a_refusal_is_the_last_sampled_before_it() -> None:
    states = [(0.0, 10.0, 0.5), (1.0, 128.0, 0.5), (2.0, 10.0, 0.95)]
    assert state_at(states, 1.5) == (1.0, 128.0, 0.5)
    assert state_at(states, -1.0) == (0.0, 10.0, 0.5)
    assert state_at([], 1.0) is None
    assert had_room((0.0, 10.0, 0.5), 128)
    assert not had_room((0.0, 128.0, 0.5), 128)  # every sequence taken
    assert not had_room((0.0, 10.0, 0.95), 128)  # KV cache over 90%


def test_refusals_while_the_engine_had_room_are_flagged() -> None:
    states = [(0.0, 10.0, 0.5), (1.0, 128.0, 0.5), (2.0, 10.0, 0.95)]
    found = refusals([0.5, 1.5, 2.5], states, 128)
    assert (found.count, found.with_room, found.first_s, found.last_s) == (3, 1, 0.5, 2.5)
    assert refusals([], states, 128).first_s is None
