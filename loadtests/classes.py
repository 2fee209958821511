"""Each step of a run per class of users: what each class was served, and
what missed.

A class is a user's label (``chat``, ``bulk``: the records' ``user``). A
request *misses* when it was refused (429/503: a refusal is an answer the
user did not want, not a request spared), when it failed, or when it was
served later than the objective it carried (``slo``, where the user set
one). TTFT quantiles are over the requests served. Pure functions, tested on
synthetic records; the report and the rounds' summary use them.
"""

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from loadtests.phases import quantile
from loadtests.schedule import Stage

REFUSED = (429, 503)


@dataclass
class ClassStep:
    name: str
    requests: int = 0
    served: int = 0
    refused: int = 0
    failed: int = 0
    late: int = 0
    objective: float | None = None
    ttft_p50: float | None = None
    ttft_p99: float | None = None

    @property
    def misses(self) -> int:
        return self.refused + self.failed + self.late

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "misses": self.misses}


def class_names(records: Sequence[dict[str, Any]]) -> list[str]:
    return sorted({str(r["user"]) for r in records if "user" in r})


def served(record: dict[str, Any]) -> bool:
    """Answered whole: a 200 whose stream gave a first token and broke not."""
    return record["status"] == 200 and record.get("error") is None and record["ttft"] is not None


def class_step(name: str, records: Sequence[dict[str, Any]]) -> ClassStep:
    step = ClassStep(name=name, requests=len(records))
    ttfts = []
    for record in records:
        objective = record.get("slo")
        if objective is not None:
            step.objective = objective
        if served(record):
            step.served += 1
            ttfts.append(record["ttft"])
            if objective is not None and record["ttft"] > objective:
                step.late += 1
        elif record["status"] in REFUSED:
            step.refused += 1
        else:
            step.failed += 1
    step.ttft_p50, step.ttft_p99 = quantile(ttfts, 0.5), quantile(ttfts, 0.99)
    return step


def class_steps(
    stages: Sequence[Stage], t0: float, records: Sequence[dict[str, Any]]
) -> list[dict[str, ClassStep]]:
    """Per step, per class: a step counts the requests its users started
    (as ``loadtests.phases.build_steps`` does)."""
    names = class_names(records)
    steps = []
    for stage in stages:
        mine = [r for r in records if t0 + stage.start <= r["start"] < t0 + stage.end]
        steps.append({n: class_step(n, [r for r in mine if r["user"] == n]) for n in names})
    return steps


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def describe_classes(users: Sequence[int], steps: Sequence[dict[str, ClassStep]]) -> str:
    """The report's section: one row per step and class."""
    lines = [
        "## Classes",
        "",
        "| users | class | requests | served | refused | failed | late | misses |"
        " TTFT p50 | TTFT p99 |",
        "|" + "---|" * 10,
    ]
    for count, classes in zip(users, steps, strict=True):
        for step in classes.values():
            lines.append(
                f"| {count} | {step.name} | {step.requests} | {step.served} | {step.refused} |"
                f" {step.failed} | {step.late} | {step.misses} | {_fmt(step.ttft_p50)} |"
                f" {_fmt(step.ttft_p99)} |"
            )
    objectives = {
        step.name: step.objective
        for classes in steps
        for step in classes.values()
        if step.objective is not None
    }
    said = ", ".join(f"{name} {seconds:g} s" for name, seconds in sorted(objectives.items()))
    lines += [
        "",
        "A miss is a request refused (429/503), failed, or served after its TTFT objective"
        f" ({said or 'none set: late counts nothing'}). TTFT over the requests served.",
        "",
    ]
    return "\n".join(lines)


def plot_classes(
    users: Sequence[int], steps: Sequence[dict[str, ClassStep]], out: Path, title: str
) -> Path:
    """TTFT p50 and p99 per class, and each class's misses, against users."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({name for classes in steps for name in classes})
    figure, (ttft, misses) = plt.subplots(1, 2, figsize=(11, 3.8))
    for index, name in enumerate(names):
        rows = [classes.get(name) for classes in steps]
        color = f"C{index}"  # one colour a class: its p99 solid, its p50 dashed
        for attribute, style in (("ttft_p99", "o-"), ("ttft_p50", "s--")):
            values = [getattr(row, attribute) if row else None for row in rows]
            ttft.plot(
                users,
                [float("nan") if v is None else v for v in values],
                style,
                color=color,
                label=f"{name} {attribute.removeprefix('ttft_')}",
            )
        misses.plot(
            users, [row.misses if row else 0 for row in rows], "o-", color=color, label=name
        )
    for axis, label in ((ttft, "TTFT per class (s)"), (misses, "misses per step")):
        axis.set_xscale("log", base=2)
        axis.set_xticks(list(users), [str(u) for u in users])
        axis.set_xlabel("concurrent users")
        axis.set_title(f"{label} — {title}", fontsize=9)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    path = out / "ttft-classes.png"
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path
