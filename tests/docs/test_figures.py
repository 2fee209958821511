"""A page's figure names the summary it comes from.

The rule, over ``README.md`` and every page under ``docs/``: a paragraph
(a block of lines between blank lines; a table is one) that quotes a
measured figure must sit in a section that links a summary under
``results/`` — the section under its heading, or a section it sits in —
or say what it is instead:

- ``(estimate`` or ``not a measurement`` — a figure worked out, not measured;
- ``not a benchmark`` — an example;
- in ``docs/benchmarks-archive.md`` only, ``(no summary:`` — a superseded
  run measured before runs were kept (current pages may not say it).

The marker may be in the paragraph or in the heading of a section it sits
in. A measured figure is what a run reports and a setting or a formula does
not: a ratio with decimals (``0.96×``), a rate (``tok/s``, ``admissions/s``),
CPU time (``CPU-s``, ``CPU µs``), a share with decimals (``97.4%``), or a
time in s or ms within a few words after TTFT, ITL, p50, p95 or p99 (not
a threshold or a window: "p99 above 2 s", "over the last 30 s"). Defaults
(``1.5``, ``30 s``), multipliers (``4×``) and formulas do not match.
results/README.md says the same for authors.
"""

import re
from pathlib import Path

import pytest

from tests.docs.pages import DOCS, RESULTS, ROOT, Section, is_relative, links, resolve, sections
from tests.docs.pages import pages as all_pages

FIGURE = re.compile(
    r"(?<![\w.])\d[\d,]*\.\d+(?:×|x\b)"  # a ratio: 0.96×, 1.12x
    r"|(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:tok/s|tokens/s|tokens per second|admissions/s|req/s)"
    r"|(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:CPU-s|CPU-ms|CPU µs|ms of CPU|µs of CPU)"
    r"|(?<![\w.])[+-−]?\d+\.\d+%"  # a measured share: 97.4%
    # a latency quoted after its percentile, not a threshold or a window ("above 2 s")
    r"|(?:TTFT|ITL|p50|p95|p99)\b[^.\n|;]{0,40}?"
    r"(?<!above )(?<!below )(?<!under )(?<!within )(?<!over the last )(?<!at most )"
    r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s?(?:ms|s)\b"
)
MARKERS = ("(estimate", "not a measurement", "not a benchmark")
ARCHIVE = DOCS / "benchmarks-archive.md"
ARCHIVE_MARKER = "(no summary:"


def names_a_summary(page: Path, section: Section) -> bool:
    """Whether the section, or one it sits in, links into results/."""
    for part in section.chain():
        for target in links("\n".join([part.heading, *part.lines])):
            if is_relative(target) and resolve(page, target).is_relative_to(RESULTS):
                return True
    return False


def marked(page: Path, section: Section, paragraph: str) -> bool:
    markers = (*MARKERS, ARCHIVE_MARKER) if page == ARCHIVE else MARKERS
    headings = [part.heading for part in section.chain()]
    return any(marker in text for marker in markers for text in (paragraph, *headings))


def unsourced(page: Path, text: str | None = None) -> list[str]:
    """The paragraphs of ``page`` (or of ``text`` read as that page) that
    quote a figure and name no summary."""
    found = []
    for section in sections(page.read_text() if text is None else text):
        if names_a_summary(page, section):
            continue
        for paragraph in section.paragraphs():
            figures = FIGURE.findall(paragraph)
            if figures and not marked(page, section, paragraph):
                found.append(f"§ {section.heading or '(top)'}: {', '.join(figures[:4])}")
    return found


@pytest.mark.parametrize("page", all_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_figure_names_its_summary(page: Path) -> None:
    assert unsourced(page) == [], (
        "link the run's summary under results/ in the section, or mark it (estimate)"
    )


def test_the_rule_sees_figures_and_not_settings() -> None:
    page = DOCS / "example.md"  # never written: the rule reads the text it is given
    quoted = "# T\n\n## Overload\n\nThe gateway read 0.96× direct, 2,056 tok/s.\n"
    settings = (
        "# T\n\n## Settings\n\n`GATEWAY_QUEUE_TIMEOUT` (30 s), 4× the cap, 1.5 by default;"
        " an alert when TTFT p99 is above 2 s.\n"
    )
    assert unsourced(page, quoted) == ["§ Overload: 0.96×, 2,056 tok/s"]
    assert unsourced(page, settings) == []
    linked = quoted + "\n[the run](../results/overhead/noise-band/anchors.md)\n"
    assert unsourced(page, linked) == []
    assert unsourced(page, quoted.replace("tok/s.", "tok/s (estimate).")) == []
    # The archive's marker is the archive's alone.
    archived = quoted.replace("tok/s.", "tok/s (no summary: measured before runs were kept).")
    assert unsourced(page, archived) != []
    assert unsourced(ARCHIVE, archived) == []
