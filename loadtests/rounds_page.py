"""The rounds' summary: a folder of rounds read back, its page and picture.

    .venv/bin/python -m loadtests.rounds_page reports/<rounds>    # (re)write

The folder (``benchmarks/showcase_rounds.py`` writes it) holds ``rounds.json``
(the shape, each round's order) and one run per round and target,
``round-<n>/<target>/<run>/summary.json``. Writes ``summary.md`` (the tables
of ``loadtests/rounds.py``, then each round's cells), ``rounds.json``'s
``steps`` and ``<shape>-rounds.png`` beside them.
"""

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from loadtests.rounds import NAMES, TARGETS, Round, RoundStep, Spread, aggregate, class_names

PLAN = "rounds.json"


def load_rounds(folder: Path) -> tuple[dict[str, Any], list[Round]]:
    """The plan and, per round that ran whole, each target's summary."""
    plan: dict[str, Any] = json.loads((folder / PLAN).read_text())
    rounds = []
    for number in range(1, len(plan["order"]) + 1):
        runs = {}
        for target in TARGETS:
            found = sorted((folder / f"round-{number}" / target).glob("*/summary.json"))
            if found:
                runs[target] = json.loads(found[-1].read_text())
        if len(runs) == len(TARGETS):
            rounds.append(runs)
    return plan, rounds


def _cell(value: Spread | None, digits: int = 3) -> str:
    return "-" if value is None else value.cell(digits)


def _ratio(value: Spread | None) -> str:
    if value is None:
        return "-"
    if value.low == value.high:
        return f"{value.median:.2f}×"
    return f"{value.median:.2f}× ({value.low:.2f}–{value.high:.2f})"


def _row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    return [_row(headers), "|" + "---|" * len(headers), *(_row(r) for r in rows)]


def _stages(stages: Sequence[dict[str, Any]]) -> str:
    by_length: dict[float, list[str]] = {}
    for stage in stages:
        by_length.setdefault(stage["end"] - stage["start"], []).append(str(stage["users"]))
    return "; ".join(f"{', '.join(users)} users {s:g} s each" for s, users in by_length.items())


def describe_rounds(plan: dict[str, Any], rounds: Sequence[Round], steps: list[RoundStep]) -> str:
    shape = plan["shape"]
    names = class_names(rounds)
    lines = [
        f"# Load report: {shape} in {len(rounds)} rounds — direct, direct again, the gateway",
        "",
        "## Rounds",
        "",
        *_intro(plan, rounds, names),
        "",
        "## Throughput (tokens/s)",
        "",
        *_table(
            ["users", *(NAMES[t] for t in TARGETS), "again ÷ direct", "gateway ÷ direct", "mark"],
            [
                [
                    s.users,
                    *(_cell(s.tokens[t], 0) for t in TARGETS),
                    _ratio(s.tokens_ratio["again"]),
                    _ratio(s.tokens_ratio["gateway"]),
                    "slower" if s.slower else "",
                ]
                for s in steps
            ],
        ),
        "",
        "## TTFT (s)",
        "",
        *_table(
            [
                "users",
                *(f"p50 {NAMES[t]}" for t in TARGETS),
                *(f"p99 {NAMES[t]}" for t in TARGETS),
                "band (p99)",
                "gateway p99 ÷ direct",
                "mark",
            ],
            [
                [
                    s.users,
                    *(_cell(s.ttft_p50[t]) for t in TARGETS),
                    *(_cell(s.ttft_p99[t]) for t in TARGETS),
                    _fmt(s.band_p99),
                    _ratio(s.ttft_p99_ratio["gateway"]),
                    "later" if s.later else "",
                ]
                for s in steps
            ],
        ),
    ]
    if len(names) > 1:
        lines += ["", *_classes(names, steps)]
    lines += ["", "## Each round", "", *_each_round(plan, rounds, names)]
    lines += ["", f"![{shape} in rounds]({shape}-rounds.png)", ""]
    return "\n".join(lines)


def _intro(plan: dict[str, Any], rounds: Sequence[Round], names: list[str]) -> list[str]:
    stages = rounds[0]["direct"]["meta"]["stages"] if rounds else []
    priority = "sent their class's priority" if plan.get("direct_priority") else "sent no priority"
    lines = [
        f"- In each round the {plan['shape']} shape ran against vLLM direct, vLLM direct again"
        " and the gateway, one after the other, the order rotated a round (below); direct again"
        " against direct is the noise band.",
        f"- Steps: {_stages(stages)}.",
        "- Each figure: the median of the rounds (min–max). Ratios: each round's run over"
        " direct's in the same round, then the median (min–max) of those.",
        "- Marks: **slower** — the gateway's median tokens/s below the lowest direct again had;"
        " **later** — the gateway's median TTFT p99 above direct's median plus the band (the"
        " widest gap between direct and direct again in one round's TTFT p99).",
    ]
    if len(names) > 1:
        lines.append(
            f"- Classes: {', '.join(names)}; straight at vLLM their users {priority} in the body."
        )
    missing = len(plan["order"]) - len(rounds)
    if missing:
        lines.append(f"- {missing} of {len(plan['order'])} rounds did not run whole: left out.")
    return lines


def _classes(names: list[str], steps: list[RoundStep]) -> list[str]:
    lines = [
        "## Classes",
        "",
        "TTFT over the requests served; requests, refused (429/503) and misses (refused, failed,"
        " or served after the class's objective where it set one) summed over the rounds,"
        " direct / direct again / gateway.",
    ]
    for name in names:
        rows = []
        for s in steps:
            spreads = s.classes[name]
            rows.append(
                [
                    s.users,
                    *(_cell(spreads[t].ttft_p50) for t in TARGETS),
                    *(_cell(spreads[t].ttft_p99) for t in TARGETS),
                    *(
                        " / ".join(str(getattr(spreads[t], field)) for t in TARGETS)
                        for field in ("requests", "refused", "misses")
                    ),
                ]
            )
        headers = [
            "users",
            *(f"p50 {NAMES[t]}" for t in TARGETS),
            *(f"p99 {NAMES[t]}" for t in TARGETS),
            "requests",
            "refused",
            "misses",
        ]
        lines += ["", f"### {name}", "", *_table(headers, rows)]
    return lines


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _each_round(plan: dict[str, Any], rounds: Sequence[Round], names: list[str]) -> list[str]:
    """Every round's cells, direct / direct again / gateway."""
    headers = ["round", "order", "users", "tokens/s", "TTFT p50", "TTFT p99"]
    if len(names) > 1:
        headers += [f"{name} p99" for name in names] + [f"{name} misses" for name in names]
    rows = []
    for number, runs in enumerate(rounds, start=1):
        order = " → ".join(NAMES[t] for t in plan["order"][number - 1])
        for i, step in enumerate(runs["direct"]["steps"]):
            cells: list[object] = [number, order, step["users"]]
            for attribute, digits in (("tokens_per_s", 0), ("ttft_p50", 3), ("ttft_p99", 3)):
                cells.append(
                    " / ".join(_fmt(runs[t]["steps"][i][attribute], digits) for t in TARGETS)
                )
            if len(names) > 1:
                for field, digits in (("ttft_p99", 3), ("misses", 0)):
                    for name in names:
                        values = [
                            (runs[t].get("classes") or [{}] * (i + 1))[i].get(name, {}).get(field)
                            for t in TARGETS
                        ]
                        cells.append(" / ".join(_fmt(v, digits) for v in values))
            rows.append(cells)
    return _table(headers, rows)


def plot_rounds(steps: list[RoundStep], names: list[str], path: Path, title: str) -> None:
    """Each target's median with its min–max shaded: tokens/s, TTFT p99, and
    each class's TTFT p99."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: list[tuple[str, list[dict[str, Spread | None]]]] = [
        ("output tokens/s", [s.tokens for s in steps]),
        ("TTFT p99 (s)", [s.ttft_p99 for s in steps]),
    ]
    if len(names) > 1:
        for name in names:
            panels.append(
                (
                    f"{name}: TTFT p99 (s)",
                    [{t: s.classes[name][t].ttft_p99 for t in TARGETS} for s in steps],
                )
            )
    users = [s.users for s in steps]
    rows = (len(panels) + 1) // 2
    figure, axes = plt.subplots(rows, 2, figsize=(11, 3.8 * rows), squeeze=False)
    for axis in axes.flat[len(panels) :]:
        axis.set_visible(False)
    for axis, (label, series) in zip(axes.flat, panels, strict=False):
        for target, style in zip(TARGETS, ("o-", "s:", "^--"), strict=True):
            spreads = [row[target] for row in series]
            nan = float("nan")
            axis.plot(users, [s.median if s else nan for s in spreads], style, label=NAMES[target])
            axis.fill_between(
                users,
                [s.low if s else nan for s in spreads],
                [s.high if s else nan for s in spreads],
                alpha=0.15,
            )
        axis.set_xscale("log", base=2)
        axis.set_xticks(users, [str(u) for u in users])
        if "TTFT" in label:
            # From milliseconds before the knee to seconds past it.
            axis.set_yscale("log")
        axis.set_xlabel("concurrent users")
        axis.set_title(label, fontsize=10)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def write_rounds(folder: Path) -> Path:
    """The folder's page and picture; returns the page."""
    plan, rounds = load_rounds(folder)
    if not rounds:
        raise ValueError(f"{folder}: no round ran whole")
    steps = aggregate(rounds)
    names = class_names(rounds)
    page = folder / "summary.md"
    page.write_text(describe_rounds(plan, rounds, steps))
    plan["steps"] = [asdict(step) for step in steps]
    (folder / PLAN).write_text(json.dumps(plan, indent=2) + "\n")
    title = f"{plan['shape']} in {len(rounds)} rounds: median, min–max shaded"
    plot_rounds(steps, names, folder / f"{plan['shape']}-rounds.png", title)
    return page


if __name__ == "__main__":
    for argument in sys.argv[1:]:
        print(write_rounds(Path(argument)).read_text())
