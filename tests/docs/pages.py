"""Reading the project's pages as the docs tests need them: which pages,
their sections and paragraphs, their links and headings (GitHub's anchors),
and the history a ``git show <commit>:<path>`` reference points into."""

import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RESULTS = ROOT / "results"

# A Markdown link or picture: [text](target "title"); its text may hold one
# level of brackets ([`a[0]`](x)).
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
# A raw file's last commit, the one form a page names it in (removed files
# live in the history): `git show <commit>:<path>` or `git archive <commit> <path>`.
HISTORY = re.compile(
    r"`git (?:show (?P<commit>[0-9a-f]{7,40}):(?P<path>[^`\s]+)"
    r"|archive (?P<acommit>[0-9a-f]{7,40}) (?P<apath>[^`\s|]+))"
)
HEADING = re.compile(r"^(?P<hashes>#{1,6})\s+(?P<text>.*?)\s*#*\s*$")


def pages() -> list[Path]:
    """The pages figures are quoted in: the README and every page under docs/."""
    return [ROOT / "README.md", *sorted(DOCS.glob("**/*.md"))]


def linked_pages() -> list[Path]:
    """The pages whose links are checked: the pages and the results' summaries."""
    return [*pages(), *sorted(RESULTS.glob("**/*.md"))]


def unfenced(text: str) -> list[str]:
    """The page's lines with fenced code blanked (a ``#`` there is no heading,
    a number there no quoted figure)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            lines.append("")
        else:
            lines.append("" if fenced else line)
    return lines


@dataclass
class Section:
    """The lines under one heading, up to the next heading of any level."""

    heading: str
    level: int
    lines: list[str] = field(default_factory=list)
    parent: "Section | None" = None

    def chain(self) -> Iterator["Section"]:
        """This section and the sections it sits in."""
        section: Section | None = self
        while section is not None:
            yield section
            section = section.parent

    def paragraphs(self) -> list[str]:
        """Its blocks of consecutive non-blank lines (a table is one)."""
        blocks, current = [], []
        for line in self.lines:
            if line.strip():
                current.append(line)
            elif current:
                blocks.append("\n".join(current))
                current = []
        if current:
            blocks.append("\n".join(current))
        return blocks


def sections(text: str) -> list[Section]:
    top = Section("", 0)
    found, open_ = [top], [top]
    for line in unfenced(text):
        match = HEADING.match(line)
        if not match:
            found[-1].lines.append(line)
            continue
        level = len(match["hashes"])
        while open_[-1].level >= level:
            open_.pop()
        section = Section(match["text"], level, parent=open_[-1])
        found.append(section)
        open_.append(section)
    return found


def links(text: str) -> list[str]:
    """Every link's target in ``text`` (fenced code left out)."""
    return [m["target"] for m in LINK.finditer("\n".join(unfenced(text)))]


def is_relative(target: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:", target) and not target.startswith("//")


def resolve(page: Path, target: str) -> Path:
    """Where a relative link's path lands (its #anchor left out)."""
    path = target.split("#", 1)[0]
    return (page.parent / path).resolve() if path else page


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text as rendered (a link's text,
    no markup), lower case, every character but letters, digits, ``_``,
    ``-`` and spaces dropped, spaces made hyphens."""
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    """The anchors of ``page``'s headings, repeats numbered as GitHub numbers
    them, and the anchors it sets itself (``<a id="...">``)."""
    seen: dict[str, int] = {}
    text = page.read_text()
    found = set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))
    for line in unfenced(text):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match["text"])
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


@cache
def has_history() -> bool:
    """Whether this checkout has the history to look commits up in (a fresh
    clone does; a shallow one, or a copy without .git, does not)."""
    try:
        shallow = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except OSError:
        return False
    return shallow.returncode == 0 and shallow.stdout.strip() == "false"


def in_history(commit: str, path: str = "") -> bool:
    """Whether ``commit`` (with ``path`` in it, when given) is in the history."""
    spec = f"{commit}:{path}" if path else f"{commit}^{{commit}}"
    found = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-e", spec], capture_output=True, timeout=30
    )
    return found.returncode == 0


def history_references(text: str) -> list[tuple[str, str]]:
    """The (commit, path) of every `git show`/`git archive` reference in ``text``."""
    return [
        (m["commit"] or m["acommit"], (m["path"] or m["apath"]).rstrip("/"))
        for m in HISTORY.finditer(text)
    ]
