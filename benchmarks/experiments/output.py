"""Writing an experiment's results: a Markdown page, its data as JSON and a
plot, under ``reports/experiments-<time>/`` unless told (git ignores
``reports/``); the page is stamped as a run's summary, which
``python -m benchmarks.keep`` keeps in ``results/experiments/`` with its plot
in ``docs/experiments/`` (tables, JSON and the note on how busy the machine
was come from the benchmarks' harness)."""

import os
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import write_json
from benchmarks.harness.run import source_commit
from benchmarks.summary.page import Stamp, restamp
from deploy.local import ROOT

# The stack the experiments measure is the one running; `make up` lays it out so.
LAYOUT = (
    "the running stack's, as `make up` lays it out: the engine on {cpus}, the gateway on the"
    " cores it leaves; the client not pinned"
)


class NotApplicable(Exception):
    """The experiment cannot show anything against this stack (says why)."""


def stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def default_out() -> Path:
    """Where a run writes unless told: ``reports/experiments-<UTC time>``."""
    return ROOT / "reports" / f"experiments-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"


def stamp_page(page: Path, command: str, machine: str) -> None:
    """The page's header, as a run's summary carries it: the commit of the
    tree the experiment ran from, the date, the command, the machine, the layout."""
    recorded = source_commit(str(ROOT))
    dirty = "uncommitted changes in app/" if "+uncommitted" in recorded else ""
    cpus = os.environ.get("ENGINE_CPUS") or "all but the last core"
    header = Stamp(
        commit=recorded.split()[0],
        date=time.strftime("%Y-%m-%d", time.gmtime()),
        command=command,
        machine=machine,
        layout=LAYOUT.format(cpus=cpus),
        raw="not kept: the data beside the page stay under reports/ on the machine that ran it",
        note=dirty,
    )
    page.write_text(restamp(page.read_text(), header))


def write(out: Path, stem: str, markdown: str, data: dict[str, Any]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text(markdown, encoding="utf-8")
    write_json(out / f"{stem}.json", data)
    return out / f"{stem}.md"


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
