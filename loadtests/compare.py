"""Two load reports side by side (e.g. vLLM direct vs the gateway with admission).

    .venv/bin/python -m loadtests.compare reports/<run A> reports/<run B> [--out DIR]

Writes ``compare.png`` (one panel per metric, both runs against concurrent
users) and ``compare.md`` (the step tables next to each other) to ``--out``
(default: ``reports/compare-<A>-vs-<B>``).
"""

import argparse
import json
from pathlib import Path
from typing import Any

PANELS = [
    ("tokens_per_s", "output tokens/s"),
    ("ttft_p99", "TTFT p99 (s)"),
    ("preemptions", "preemptions per step"),
    ("waiting", "engine waiting (mean)"),
    ("gateway_queue", "gateway queue (mean)"),
    ("refused", "429/503 per step"),
]


def label(summary: dict[str, Any]) -> str:
    meta = summary["meta"]
    return f"{meta['target']} ({meta['started_iso'][:16]})"


def compare(a: Path, b: Path, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [json.loads((run / "summary.json").read_text()) for run in (a, b)]
    figure, axes = plt.subplots(2, 3, figsize=(15, 7))
    for axis, (field, title) in zip(axes.flat, PANELS, strict=True):
        for summary, style in zip(runs, ("o-", "s--"), strict=True):
            users = [step["users"] for step in summary["steps"]]
            values = [
                step[field] if step[field] is not None else float("nan")
                for step in summary["steps"]
            ]
            axis.plot(users, values, style, label=label(summary))
        axis.set_xscale("log", base=2)
        steps = [step["users"] for step in runs[0]["steps"]]
        axis.set_xticks(steps, [str(u) for u in steps])
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("concurrent users", fontsize=8)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.suptitle(f"{runs[0]['meta']['shape']}: {label(runs[0])} vs {label(runs[1])}")
    figure.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    figure.savefig(out / "compare.png", dpi=90)
    plt.close(figure)

    lines = [f"# {label(runs[0])} vs {label(runs[1])}", ""]
    lines.append("| users | " + " | ".join(f"{title} A / B" for _, title in PANELS) + " |")
    lines.append("|---|" + "---|" * len(PANELS))
    for step_a, step_b in zip(runs[0]["steps"], runs[1]["steps"], strict=False):
        cells = []
        for field, _ in PANELS:
            cells.append(
                " / ".join("-" if s[field] is None else f"{s[field]:.3g}" for s in (step_a, step_b))
            )
        lines.append(f"| {step_a['users']} | " + " | ".join(cells) + " |")
    for summary in runs:
        phases = summary["phases"]
        knee = phases["knee"]
        knee_users = summary["steps"][knee]["users"] if knee is not None else None
        lines.append("")
        lines.append(
            f"- {label(summary)}: knee at {knee_users if knee_users is not None else 'no step'}"
            f" users; {sum(s['preemptions'] for s in summary['steps']):.0f} preemptions;"
            f" {sum(s['refused'] for s in summary['steps'])} requests refused."
        )
    (out / "compare.md").write_text("\n".join(lines) + "\n")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    out = args.out or args.a.parent / f"compare-{args.a.name}-vs-{args.b.name}"
    compare(args.a, args.b, out)
    print((out / "compare.md").read_text())
    print(f"written to {out}")


if __name__ == "__main__":
    main()
