"""The summaries of the runs whose raw results were kept under ``docs/``
(each stamped in ``docs/measurements.yaml``), made from those files.

    python -m benchmarks.summary.legacy --raw-commit <commit>
    # from an older tree: git archive <commit> docs | tar -x -C /tmp/old
    python -m benchmarks.summary.legacy --source /tmp/old --raw-commit <commit>

Each stamped run becomes ``results/<its path under docs/>.md``; the
showcase's two folders become one summary per page they held. ``--raw-commit``
is a commit that still holds the raw files: the summaries and
``results/measurements.yaml`` say how to get them back from it."""

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.summary import manifest
from benchmarks.summary.kinds import KINDS, kind_of
from benchmarks.summary.page import Stamp, page, restamp
from benchmarks.summary.write import machine_text, summary

ROOT = manifest.ROOT
# The showcase's folders: pages (and pictures) rather than raw results.
SHOWCASE = ("docs/experiments", "docs/load")
SHOWCASE_LAYOUT = (
    "`make up`'s stack as it was then: the engine on all but the last core (its launcher's"
    " default), the gateway and Prometheus not pinned"
)
# Runs whose summary is not named after their folder (the folder holds other runs too).
RENAMED = {"docs/shared-state": "results/shared-state/script-reads-every-replica.md"}
PICTURE = re.compile(r"!\[([^\]]*)\]\(([^)/]+\.png)\)")


@dataclass
class Legacy:
    """One summary to write, and what it is made of."""

    summary: str
    entry: dict[str, Any]
    tables: str = ""
    notes: str = ""
    result: dict[str, Any] | None = None
    raw: str = ""
    body: str = ""  # a showcase page, kept as it was written


def _command(entry: dict[str, Any]) -> str:
    return " ".join(str(entry["command"]).split())


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return data if isinstance(data, dict) else None


def plan(source: Path, entries: list[dict[str, Any]], raw_commit: str) -> list[Legacy]:
    runs: list[Legacy] = []
    for entry in entries:
        path = str(entry["path"])
        where = source / path
        if path in SHOWCASE:
            runs += _showcase(source, entry, raw_commit)
        elif where.is_dir():
            readme = where / "README.md"
            runs.append(
                Legacy(
                    summary=RENAMED.get(path, "results/" + path.removeprefix("docs/") + ".md"),
                    entry=entry,
                    tables=_text(where / "tables.md"),
                    notes=_text(readme) if readme.is_file() else "",
                    result=_read_json(where / "result.json"),
                    raw=f"git archive {raw_commit} {path}",
                )
            )
        else:
            files = sorted(p for p in where.parent.glob(where.name + ".*") if p.is_file())
            log = [p for p in files if p.suffix == ".log"]
            runs.append(
                Legacy(
                    summary="results/" + path.removeprefix("docs/") + ".md",
                    entry=entry,
                    tables=_text(where.with_suffix(".md")) if not log else "",
                    notes=_log_lines(log[0]) if log else "",
                    result=_read_json(Path(str(where) + ".json")),
                    raw=", ".join(
                        f"git show {raw_commit}:{p.relative_to(source)}"
                        for p in files
                        if p.suffix != ".md"
                    ),
                )
            )
    return runs


def _text(path: Path) -> str:
    return path.read_text() if path.is_file() else ""


def _log_lines(log: Path) -> str:
    """A run that stopped before writing its result: what it printed, up to
    the traceback's last line."""
    lines = log.read_text().splitlines()
    if "Traceback (most recent call last):" in lines:
        cut = lines.index("Traceback (most recent call last):")
        lines = [*lines[:cut], "…", lines[-1]]
    return "What the run printed before it stopped:\n\n```\n" + "\n".join(lines) + "\n```"


def _showcase(source: Path, entry: dict[str, Any], raw_commit: str) -> list[Legacy]:
    folder = source / str(entry["path"])
    runs = []
    for md in sorted(folder.glob("*.md")):
        if md.name == "checklist.md":  # a page about the runs, not a run
            continue
        raw = [p for p in (md.with_suffix(".json"),) if p.is_file()]
        if md.stem == "direct-vs-gateway":
            raw = sorted(folder.glob("degradation-*.json"))
        runs.append(
            Legacy(
                summary=f"results/{folder.name}/{md.stem}.md",
                entry=entry,
                body=md.read_text(),
                raw=", ".join(f"git show {raw_commit}:{p.relative_to(source)}" for p in raw),
            )
        )
    return runs


def _showcase_machine(body: str) -> str:
    found = re.search(r"Machine at the start: (.*?)\.?$", body, re.M)
    if found:
        return found[1].replace("; at the end:", "; at the end")
    return "2 cores (the project's machine kind); the load report records no more"


def stamp_of(run: Legacy) -> Stamp:
    entry = run.entry
    if run.result is not None:
        layout = KINDS[kind_of(run.result)].layout(run.result)
        machine = machine_text(run.result)
    elif run.body:
        layout, machine = SHOWCASE_LAYOUT, _showcase_machine(run.body)
    else:
        layout = KINDS["shared-state"].layout({})
        machine = "not recorded (the run stopped before writing its result)"
    return Stamp(
        commit=str(entry["commit"]),
        date=str(entry["date"]),
        command=_command(entry),
        machine=machine,
        layout=layout,
        raw=run.raw,
        note=str(entry.get("note", "")),
    )


def render(run: Legacy) -> str:
    stamp = stamp_of(run)
    title = run.summary.removeprefix("results/").removesuffix(".md")
    if run.body:
        body = "\n".join(
            line for line in run.body.splitlines() if not line.startswith("Measured at ")
        )
        area = run.summary.split("/")[1]
        body = PICTURE.sub(rf"![\1](../../docs/{area}/\2)", body)
        return restamp(body, stamp)
    if run.result is not None:
        return summary(title, run.result, run.tables, stamp, run.notes)
    return page(title, stamp, [("Notes", run.notes), ("Tables", run.tables)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--source", type=Path, default=ROOT, help="a tree that holds docs/")
    parser.add_argument("--raw-commit", required=True, help="a commit that holds the raw files")
    parser.add_argument("--out", type=Path, default=ROOT, help="where results/ is written")
    args = parser.parse_args(argv)
    listed = yaml.safe_load((args.source / "docs" / "measurements.yaml").read_text())
    entries: list[dict[str, Any]] = listed["measurements"]
    stamps = []
    for run in plan(args.source, entries, args.raw_commit):
        text = render(run)
        path = args.out / run.summary
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        stamps.append(manifest.entry(run.summary, stamp_of(run)))
        print(f"{len(text.encode()):>7,} {run.summary}")
    manifest.write(stamps, args.out / "results" / "measurements.yaml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
