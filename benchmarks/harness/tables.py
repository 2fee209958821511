"""Figures as text: quantiles, milliseconds, numbers, Markdown tables, JSON."""

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from loadtests.phases import quantile


def q(values: Sequence[float], p: float) -> float | None:
    return quantile(values, p)


def ms(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v * 1000:.{digits}f}"


def num(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def median_range(values: Iterable[float | None], digits: int = 2) -> str:
    """``median (min–max)`` of the values given (None skipped); ``-`` for none."""
    given = [v for v in values if v is not None]
    if not given:
        return "-"
    low, mid, high = (num(v, digits) for v in (min(given), q(given, 0.5), max(given)))
    return f"{mid} ({low}–{high})"


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table (each cell as ``str`` gives it)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def sections(parts: Iterable[str]) -> str:
    """Titled tables one after another, as ``tables.md`` has them."""
    return "\n\n".join(parts) + "\n"


def write_json(path: Path, data: Any) -> None:
    """``data`` as indented JSON; dataclasses as their fields, anything else
    JSON has no type for (paths, say) as its text."""
    path.write_text(json.dumps(data, indent=2, default=_plain) + "\n")


def _plain(thing: object) -> object:
    if is_dataclass(thing) and not isinstance(thing, type):
        return asdict(thing)
    return str(thing)
