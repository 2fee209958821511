"""Keys files for the tests, made by the app's own code: each entry as
``python -m app.keys new`` makes one, each hash by the key ring's function,
and every entry checked against the file's schema before it is written, so
a test's file is one the gateway reads."""

import argparse
from collections.abc import Iterable, Sequence
from pathlib import Path

import yaml

from app.keys.__main__ import new_entry
from app.keys.file import KeyEntry
from app.keys.ring import hash_key

Entry = dict[str, object]


def new_key(
    key_id: str,
    tenant: str,
    priorities: Sequence[str] = ("normal",),
    requests_per_minute: int | None = None,
    tokens_per_minute: int | None = None,
    max_concurrent: int | None = None,
    models: Sequence[str] | None = None,
) -> tuple[str, Entry]:
    """A fresh key and its entry, as ``python -m app.keys new`` makes them."""
    args = argparse.Namespace(
        id=key_id,
        tenant=tenant,
        priorities=",".join(priorities),
        requests_per_minute=requests_per_minute,
        tokens_per_minute=tokens_per_minute,
        max_concurrent=max_concurrent,
        models=None if models is None else ",".join(models),
    )
    return new_entry(args)


def key_entry(
    key_id: str,
    tenant: str,
    key: str,
    priorities: Sequence[str] = ("normal",),
    requests_per_minute: int | None = None,
    tokens_per_minute: int | None = None,
    max_concurrent: int | None = None,
    models: Sequence[str] | None = None,
) -> Entry:
    """The entry of a key the test chose (readable in a failure, unlike a
    fresh one): ``new_key``'s entry with this key's hash."""
    _, entry = new_key(
        key_id, tenant, priorities, requests_per_minute, tokens_per_minute, max_concurrent, models
    )
    return {**entry, "sha256": hash_key(key)}


def write_keys_file(path: Path, entries: Iterable[Entry]) -> Path:
    """``path``, now a keys file of ``entries``."""
    listed = list(entries)
    for entry in listed:
        KeyEntry.model_validate(entry)
    path.write_text(yaml.safe_dump({"keys": listed}, sort_keys=False))
    return path


def keys_in(path: Path) -> list[Entry]:
    """The entries of a keys file written by ``write_keys_file``."""
    entries: list[Entry] = yaml.safe_load(path.read_text())["keys"]
    return entries
