"""Keep a run: its summary into ``results/``, its stamp into
``results/measurements.yaml``; the raw results stay where the run wrote
them (under ``reports/``, which git ignores).

    python -m benchmarks.keep reports/overhead-20261206-015900 results/overhead/noise-band/anchors
    python -m benchmarks.keep reports/experiments-20261206-0900/batching-24-blocks.md \\
        results/experiments/batching-24-blocks
    make keep RUN=reports/<run> AS=results/<area>/<name> [NOTE="..."]

The source is a run's folder (its ``summary.md``) or a summary page itself.
Pictures the summary shows (``![...](x.png)`` beside it) go to
``docs/<area>/``, where the pages find them, and the summary's links follow.
"""

import argparse
import os
import re
import shutil
import sys
from pathlib import Path

from benchmarks.summary import manifest
from benchmarks.summary.page import MAX_BYTES, SUMMARY_NAME, Stamp, read_stamp, restamp

ROOT = manifest.ROOT
PICTURE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<src>[^)\s]+\.(?:png|svg))\)")


class NotKept(Exception):
    """The run cannot be kept as it is (says why)."""


def source_page(source: Path) -> Path:
    page = source / SUMMARY_NAME if source.is_dir() else source
    if not page.is_file():
        raise NotKept(f"{page}: no summary (a benchmark writes {SUMMARY_NAME} beside its results)")
    return page


def destination(name: str, root: Path = ROOT) -> Path:
    """``results/<area>/<name>`` as the summary's path (``.md`` added)."""
    path = Path(name)
    path = path if path.is_absolute() else root / path
    path = path.with_suffix(".md") if path.suffix != ".md" else path
    results = root / "results"
    if not path.is_relative_to(results) or len(path.relative_to(results).parts) < 2:
        raise NotKept(f"{name}: a summary goes to results/<area>/<name>")
    return path


def move_pictures(text: str, page: Path, summary: Path, root: Path = ROOT) -> str:
    """Copy the pictures ``text`` shows from beside ``page`` into
    ``docs/<area>/`` and point its links there."""
    area = summary.parent.relative_to(root / "results")
    pictures = root / "docs" / area

    def moved(match: re.Match[str]) -> str:
        src = page.parent / match["src"]
        if not src.is_file():
            return match.group(0)
        pictures.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, pictures / src.name)
        link = os.path.relpath(pictures / src.name, summary.parent)
        return f"![{match['alt']}]({link})"

    return PICTURE.sub(moved, text)


def keep(
    source: Path,
    name: str,
    note: str = "",
    replace: bool = False,
    root: Path = ROOT,
) -> Path:
    page = source_page(source)
    text = page.read_text()
    stamp = read_stamp(text)
    if stamp is None:
        raise NotKept(f"{page}: its header does not say commit, date, command, machine, layout")
    summary = destination(name, root)
    if summary.exists() and not replace:
        raise NotKept(f"{summary.relative_to(root)} exists (--replace to measure it again)")
    if note:
        stamp = Stamp(**{**stamp.__dict__, "note": note})
    text = move_pictures(restamp(text, stamp), page, summary, root)
    if len(text.encode()) > MAX_BYTES:
        raise NotKept(f"{page}: over {MAX_BYTES:,} bytes; a summary is read in review")
    summary.parent.mkdir(parents=True, exist_ok=True)
    summary.write_text(text)
    path = str(summary.relative_to(root))
    manifest.put([manifest.entry(path, stamp)], root / "results" / "measurements.yaml")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("run", type=Path, help="reports/<run> or a summary page")
    parser.add_argument("name", help="results/<area>/<name>")
    parser.add_argument("--note", default="", help="what the run shows, for the stamp")
    parser.add_argument("--replace", action="store_true", help="replace a kept summary")
    args = parser.parse_args(argv)
    try:
        kept = keep(args.run, args.name, args.note, args.replace)
    except NotKept as reason:
        print(f"not kept: {reason}", file=sys.stderr)
        return 2
    print(f"kept {kept.relative_to(ROOT)}; stamped in results/measurements.yaml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
