"""A run's summary page: its stamp (the header every summary opens with),
its sections, and the small Markdown helpers they are written with.

The header is a list of ``- field: value`` lines under the title, before the
first ``##`` heading; ``read_stamp`` reads it back, so ``benchmarks.keep``
and the suite take a summary's commit, date and command from the page
itself rather than from a second copy that could drift."""

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

# A summary is what review reads and git keeps: small enough to read in a
# diff; the raw results it comes from stay out of the tree.
MAX_BYTES = 50_000
SUMMARY_NAME = "summary.md"

# The header's fields in the order they are written, as (attribute, label).
HEADER = (
    ("commit", "commit"),
    ("date", "date"),
    ("command", "command"),
    ("machine", "machine"),
    ("layout", "layout"),
    ("raw", "raw results"),
    ("note", "note"),
)
_LINE = re.compile(r"^- (?P<label>[a-z ]+): (?P<value>.*)$")


@dataclass
class Stamp:
    """What measured a run, as its summary's header and its entry in
    ``results/measurements.yaml`` say it."""

    commit: str
    date: str
    command: str
    machine: str
    layout: str
    raw: str = ""
    note: str = ""

    def header_lines(self) -> list[str]:
        lines = []
        for attribute, label in HEADER:
            value = getattr(self, attribute)
            if not value:
                continue
            if attribute in ("commit", "command"):
                value = code(value)
            elif attribute == "raw":
                value = ", ".join(code(p) if p.startswith("git ") else p for p in value.split(", "))
            lines.append(f"- {label}: {value}")
        return lines


def code(text: str) -> str:
    """``text`` as inline code, fenced with enough backticks for what it holds."""
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _uncode(text: str) -> str:
    for fence in ("``", "`"):
        if len(text) > 2 * len(fence) and text.startswith(fence) and text.endswith(fence):
            return text[len(fence) : -len(fence)].strip()
    return text


def read_stamp(text: str) -> Stamp | None:
    """The stamp a summary's header holds (None: the page has no header)."""
    labels = {label: attribute for attribute, label in HEADER}
    found: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("## "):
            break
        match = _LINE.match(line)
        if match and match["label"] in labels:
            parts = match["value"].strip().split(", ") if match["label"] == "raw results" else None
            value = ", ".join(map(_uncode, parts)) if parts else _uncode(match["value"].strip())
            found[labels[match["label"]]] = value
    names = {f.name for f in fields(Stamp)}
    if not {"commit", "date", "command", "machine", "layout"} <= set(found):
        return None
    return Stamp(**{k: v for k, v in found.items() if k in names})


def page(title: str, stamp: Stamp, sections: Iterable[tuple[str, str]]) -> str:
    """The whole summary: the title, the stamp, then each (heading, body)."""
    parts = [f"# {title}", "\n".join(stamp.header_lines())]
    parts += [f"## {heading}\n\n{body.strip()}" for heading, body in sections if body.strip()]
    return "\n\n".join(parts) + "\n"


def restamp(text: str, stamp: Stamp) -> str:
    """``text`` with its header replaced by ``stamp`` (added under the title
    when it has none)."""
    lines = text.splitlines()
    title = lines[0] if lines and lines[0].startswith("# ") else "# Run"
    body = lines[1:] if lines and lines[0].startswith("# ") else lines
    # An earlier header: the leading run of header lines (and blank lines).
    while body and (not body[0].strip() or _is_header_line(body[0])):
        body.pop(0)
    return "\n".join([title, "", *stamp.header_lines(), "", *body]).rstrip() + "\n"


def _is_header_line(line: str) -> bool:
    match = _LINE.match(line)
    return match is not None and match["label"] in {label for _, label in HEADER}


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table; a cell's ``|`` escaped so it stays one cell."""

    def cell(value: object) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def fixed(value: float | None, digits: int = 2, scale: float = 1.0) -> str:
    """A figure with ``digits`` decimals and thousands separators; ``-`` for none."""
    return "-" if value is None else f"{value * scale:,.{digits}f}"


def too_large(path: Path) -> bool:
    return path.stat().st_size > MAX_BYTES
