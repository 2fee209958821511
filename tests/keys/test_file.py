"""The keys file: what a good one holds, and how a bad one is refused."""

from pathlib import Path

import pytest

from app.keys.file import KeysFileError, read_keys

HASH = "a" * 64


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "keys.yaml"
    path.write_text(text)
    return path


def test_the_documented_shape(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
keys:
  - id: acme-batch
    tenant: acme
    sha256: "{HASH.upper()}"
    priorities: [normal, low]
    requests_per_minute: 600
    tokens_per_minute: 200000
    max_concurrent: 16
  - id: globex
    tenant: globex
    sha256: "{"b" * 64}"
""",
    )
    batch, globex = read_keys(path)
    assert batch.sha256 == HASH
    assert batch.priorities == ("normal", "low")
    assert (batch.requests_per_minute, batch.tokens_per_minute, batch.max_concurrent) == (
        600,
        200000,
        16,
    )
    assert globex.priorities == ("normal",)
    assert globex.tokens_per_minute is None


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("keys: [{id: a, tenant: t, sha256: nothex}]", "sha256"),
        (f"keys: [{{id: a, tenant: t, sha256: '{HASH}', priorities: [urgent]}}]", "priorities"),
        (f"keys: [{{id: a, tenant: 'a b', sha256: '{HASH}'}}]", "tenant"),
        (f"keys: [{{id: a, tenant: t, sha256: '{HASH}', secret: x}}]", "secret"),
        (f"keys: [{{id: a, tenant: t, sha256: '{HASH}', tokens_per_minute: 0}}]", "tokens"),
        (
            f"keys: [{{id: a, tenant: t, sha256: '{HASH}'}},"
            f" {{id: a, tenant: u, sha256: '{'c' * 64}'}}]",
            "two keys have the id a",
        ),
        (
            f"keys: [{{id: a, tenant: t, sha256: '{HASH}'}},"
            f" {{id: b, tenant: u, sha256: '{HASH}'}}]",
            "two keys have the sha256",
        ),
        ("keys: [unclosed", "keys.yaml"),
    ],
)
def test_a_bad_file_is_refused_with_a_reason(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(KeysFileError) as caught:
        read_keys(write(tmp_path, text))
    assert words in str(caught.value)
    assert HASH not in str(caught.value)


def test_an_empty_file_has_no_keys(tmp_path: Path) -> None:
    assert read_keys(write(tmp_path, "")) == []
