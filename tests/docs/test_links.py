"""Every link in the README, the pages under docs/ and the summaries under
results/ lands: a relative link on a file or folder that exists (the
gateway's source files too), an ``#anchor`` on a heading of the page it
names (GitHub's anchors), and a ``git show <commit>:<path>`` or ``git
archive <commit> <path>`` reference on a commit that holds the path, where
the checkout has the history (a fresh clone does; a shallow one does not)."""

from pathlib import Path

import pytest

from tests.docs.pages import (
    ROOT,
    anchors,
    has_history,
    history_references,
    in_history,
    is_relative,
    linked_pages,
    links,
    resolve,
    slug,
)


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in links(page.read_text()):
        if not is_relative(target):
            continue
        landed = resolve(page, target)
        if not landed.exists():
            broken.append(f"{target}: no such file")
            continue
        anchor = target.split("#", 1)[1] if "#" in target else ""
        if anchor and landed.suffix == ".md" and anchor not in anchors(landed):
            broken.append(f"{target}: no such heading")
    return broken


@pytest.mark.parametrize("page", linked_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_lands(page: Path) -> None:
    assert broken_links(page) == []


@pytest.mark.live  # git: the history (not in `make test-unit`)
@pytest.mark.parametrize("page", linked_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_reference_into_the_history_lands(page: Path) -> None:
    if not has_history():
        pytest.skip("a shallow checkout: no history to look in")
    missing = [
        f"{commit}:{path}"
        for commit, path in history_references(page.read_text())
        if not in_history(commit, path)
    ]
    assert missing == []


def test_anchors_are_githubs() -> None:
    assert (
        slug("Where the engine's core goes under overload (5–6 December 2026, 59d4a0c)")
        == "where-the-engines-core-goes-under-overload-56-december-2026-59d4a0c"
    )
    assert slug("Burst: 48 concurrent streams, `max_tokens` 256") == (
        "burst-48-concurrent-streams-max_tokens-256"
    )
    assert slug("What it costs: 1.6 ms per request") == "what-it-costs-16-ms-per-request"
    assert slug("[docs](x.md) and more") == "docs-and-more"


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## A heading\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[ok](other.md#a-heading) [gone](missing.md) [bad](other.md#nope)"
        " [web](https://example.com) [self](#page)\n"
    )
    assert broken_links(page) == ["missing.md: no such file", "other.md#nope: no such heading"]
