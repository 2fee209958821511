"""Render a dashboard's panels from Prometheus range queries into one PNG.

    .venv/bin/python -m dashboards.snapshot --dashboard degradation \\
        --prometheus http://127.0.0.1:9090 --minutes 10 --out docs/degradation-dashboard.png

What Grafana would show, without Grafana: every panel of the dashboard JSON
with its queries (variables filled in: every model, a fixed rate interval),
run over the chosen window, one subplot per panel.
"""

import argparse
import json
import math
import re
import time
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def range_query(
    prometheus: str, expr: str, start: float, end: float, step: float
) -> list[dict[str, Any]]:
    reply = httpx.get(
        f"{prometheus}/api/v1/query_range",
        params={"query": expr, "start": start, "end": end, "step": step},
        timeout=60,
    )
    body = reply.json()
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body.get('error')}")
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def concrete(expr: str, rate_interval: str) -> str:
    return expr.replace("$__rate_interval", rate_interval).replace("$model", ".*")


def legend(template: str, labels: dict[str, str]) -> str:
    return _LEGEND.sub(lambda m: labels.get(m.group(1), ""), template) or "value"


def render(
    dashboard: dict[str, Any],
    prometheus: str,
    start: float,
    end: float,
    out: Path,
    rate_interval: str = "15s",
) -> dict[str, int]:
    """Draw the panels; returns how many series each panel drew."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [p for p in dashboard["panels"] if p.get("targets")]
    step = max(1.0, (end - start) / 400)
    columns = 2
    rows = math.ceil(len(panels) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(14, 3.2 * rows), squeeze=False)
    drawn: dict[str, int] = {}
    for axis, panel in zip(axes.flat, panels, strict=False):
        drawn[panel["title"]] = 0
        for target in panel["targets"]:
            for series in range_query(
                prometheus, concrete(target["expr"], rate_interval), start, end, step
            ):
                times = [float(t) - start for t, _ in series["values"]]
                values = [float(v) for _, v in series["values"]]
                label = legend(target.get("legendFormat", ""), series["metric"])
                axis.plot(times, values, label=label, linewidth=1.2)
                drawn[panel["title"]] += 1
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        axis.set_title(panel["title"], fontsize=10)
        axis.set_xlabel("seconds", fontsize=8)
        if unit and unit != "short":
            axis.set_ylabel(unit, fontsize=8)
        axis.tick_params(labelsize=8)
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=7, loc="upper left")
    for axis in list(axes.flat)[len(panels) :]:
        axis.axis("off")
    figure.suptitle(
        f"{dashboard['title']} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(start))})"
    )
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=90)
    plt.close(figure)
    return drawn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dashboard", default="degradation", help="gateway, engine or degradation")
    parser.add_argument("--prometheus", default="http://127.0.0.1:9090")
    parser.add_argument("--minutes", type=float, default=10.0, help="window ending now")
    parser.add_argument("--start", type=float, help="window start (unix seconds)")
    parser.add_argument("--end", type=float, help="window end (unix seconds)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    end = args.end or time.time()
    start = args.start or end - args.minutes * 60
    dashboard = json.loads((HERE / f"{args.dashboard}.json").read_text())
    render(dashboard, args.prometheus, start, end, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
