"""Rendezvous hashing (highest random weight): a prompt key's ranking of the
engines, the same on every gateway replica with no shared state; when an
engine joins or leaves, only the keys it wins or held move."""

import hashlib


def key_weight(key: int, engine: str) -> int:
    """``engine``'s weight for ``key``: the highest ranks first."""
    digest = hashlib.blake2b(f"{key}:{engine}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")
