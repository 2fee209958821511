"""Writing an experiment's results: a Markdown page, its data as JSON and a
plot (tables, JSON and the note on how busy the machine was come from the
benchmarks' harness)."""

import time
from pathlib import Path
from typing import Any

from benchmarks.harness import write_json
from deploy.local import ROOT

DOCS = ROOT / "docs" / "experiments"


class NotApplicable(Exception):
    """The experiment cannot show anything against this stack (says why)."""


def stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


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
