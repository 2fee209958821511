"""Writing an experiment's results: a Markdown page, its data as JSON, a plot,
and a note on how busy the machine was while it ran."""

import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "experiments"


class NotApplicable(Exception):
    """The experiment cannot show anything against this stack (says why)."""


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def num(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


@dataclass
class MachineState:
    """Other work on the machine: on a small box it moves the figures."""

    cores: int
    load_1m: float
    engines: int
    test_runs: int

    def describe(self) -> str:
        return (
            f"{self.cores} cores, load average {self.load_1m:.2f}, {self.engines} vLLM"
            f" engine(s) running on the machine (the measured one included),"
            f" {self.test_runs} pytest run(s)"
        )


def _command_lines() -> list[str]:
    lines = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                raw = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            lines.append(raw.replace(b"\0", b" ").decode(errors="replace"))
    return lines


def machine_state() -> MachineState:
    commands = _command_lines()
    try:
        load = float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        load = float("nan")
    return MachineState(
        cores=os.cpu_count() or 0,
        load_1m=load,
        engines=sum(1 for c in commands if "vllm.entrypoints.openai.api_server" in c),
        test_runs=sum(1 for c in commands if "-m pytest" in c or "bin/pytest" in c),
    )


def machine_note(before: MachineState, after: MachineState) -> str:
    return f"Machine at the start: {before.describe()}; at the end: {after.describe()}."


def stamp() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def write(out: Path, stem: str, markdown: str, data: dict[str, Any]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.md").write_text(markdown, encoding="utf-8")
    (out / f"{stem}.json").write_text(json.dumps(data, indent=2, default=_plain) + "\n")
    return out / f"{stem}.md"


def _plain(thing: object) -> object:
    if is_dataclass(thing) and not isinstance(thing, type):
        return asdict(thing)
    raise TypeError(f"not serialisable: {type(thing).__name__}")


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
