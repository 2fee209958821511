"""The keys the gateway knows, found by the hash of what a client presents.

The presented key is hashed and the hash looked up: no plaintext key is
stored or compared, and a lookup costs the same whichever key is presented.
The ring is replaced whole on reload, so a request sees one version of it.
"""

import hashlib
from collections.abc import Iterable

from app.keys.file import KeyEntry


class KeyRing:
    def __init__(self, entries: Iterable[KeyEntry]) -> None:
        self._by_hash = {entry.sha256: entry for entry in entries}

    def __len__(self) -> int:
        return len(self._by_hash)

    def lookup(self, presented: str) -> KeyEntry | None:
        return self._by_hash.get(hash_key(presented))

    def by_hash(self, sha256: str) -> KeyEntry | None:
        """The key whose hash is ``sha256`` (a batch runs as the key that made it)."""
        return self._by_hash.get(sha256)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
