"""``python -m benchmarks.summary reports/<run> [...]``: write a run's
``summary.md`` again from its ``result.json`` and ``tables.md`` (after the
summary's code changed, say), keeping the stamp it has."""

import argparse
import json
import sys
from pathlib import Path

from benchmarks.summary.kinds import kind_of
from benchmarks.summary.page import SUMMARY_NAME, read_stamp
from benchmarks.summary.write import stamp_of, summary


def rewrite(run: Path) -> Path:
    result = json.loads((run / "result.json").read_text())
    tables = (run / "tables.md").read_text() if (run / "tables.md").exists() else ""
    path = run / SUMMARY_NAME
    old = read_stamp(path.read_text()) if path.exists() else None
    stamp = old or stamp_of(result, command="(not recorded: the summary was written afterwards)")
    title = f"{kind_of(result)}: {run.name}"
    path.write_text(summary(title, result, tables, stamp))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("runs", nargs="+", type=Path)
    for run in parser.parse_args().runs:
        print(rewrite(run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
