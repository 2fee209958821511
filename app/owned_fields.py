"""The request fields that are the gateway's to decide, not the client's.

A client's body goes to the engine as sent, except for the fields in
``OWNED_FIELDS``: each is stripped from what the client sent or set by the
gateway, here, once, as the engine's body is built (``owned_body``).

The salt (vLLM's ``cache_salt``: requests with different salts never share
prefix-cache blocks) keeps tenants apart in the engine's prefix cache. A
tenant that could see another's cached prefix could tell what it sent from
how fast its own request starts. With keys on, every request is salted by
its tenant, unless its key shares the cache. A salt the client sent is not
passed on: the tenant's salt is derived from the tenant's name, which is no
secret, so a salt passed as sent could name another tenant's. It is folded
into the tenant's salt instead, so a client that salts its own users apart
still gets that, within its tenant and never across tenants.
"""

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

from app.errors import InvalidRequest

SALT = "cache_salt"

Rule = Literal["stripped", "salted"]

OWNED_FIELDS: dict[str, Rule] = {
    # vLLM's own scheduling priority (under --scheduling-policy priority,
    # lower runs first): a client could jump the engine's queue past the
    # gateway's priority classes, which come from the key and X-Priority and
    # which admission enforces.
    "priority": "stripped",
    # The engine's request id is the gateway's (``engine_request_id``, sent
    # as X-Request-Id): it aborts, logs and charges by it. vLLM 0.32 takes
    # the header over this field (``_base_request_id``), so the field is dead
    # weight at best; were it ever preferred, two clients sending the same id
    # would collide in the engine.
    "request_id": "stripped",
    # The tenant's prefix-cache salt, with keys on (see ``CacheScope``);
    # without keys, or with isolation off, as the client sent it.
    SALT: "salted",
}

# vLLM 0.32's own limits on a salt (``validate_cache_salt``), checked here so
# that a client gets the same answer whether the gateway salts or not.
SALT_MAX_CHARS = 128
_SALT_FORBIDDEN = frozenset("@/\\\x00")
# Hex digits of the salt the gateway sets: 128 bits of SHA-256.
_SALT_HEX = 32


@dataclass(frozen=True)
class CacheScope:
    """Whose prefix cache a request may share, when the gateway decides it:
    its tenant's alone, or (``tenant`` None) that of every key marked as
    sharing (a fleet-wide system prompt)."""

    tenant: str | None


def client_salt(body: dict[str, Any]) -> str | None:
    """The salt the client sent (null: none), or ``InvalidRequest`` for one
    the engine would refuse."""
    salt = body.get(SALT)
    if salt is None:
        return None
    if not isinstance(salt, str) or not salt:
        raise InvalidRequest(f"{SALT}: must be a non-empty string", param=SALT)
    if len(salt) > SALT_MAX_CHARS or not _SALT_FORBIDDEN.isdisjoint(salt):
        raise InvalidRequest(
            f"{SALT}: at most {SALT_MAX_CHARS} characters, none of @ / \\ or NUL", param=SALT
        )
    return salt


def salt_for(scope: CacheScope, sent: str | None) -> str | None:
    """The salt the gateway sends for ``scope``, given the client's.

    The tenant's is the first 32 hex digits of the SHA-256 of its name, the
    same on every replica and after every restart. A tenant name is never
    empty and never holds NUL, so ``tenant``, ``tenant NUL sent`` and (a
    sharing key's) ``NUL sent`` never hash the same input for two scopes.
    A sharing key without a salt of its own sends none."""
    if scope.tenant is None and sent is None:
        return None
    seed = scope.tenant or ""
    if sent is not None:
        seed = f"{seed}\0{sent}"
    return hashlib.sha256(seed.encode("utf-8", "surrogatepass")).hexdigest()[:_SALT_HEX]


def owned_body(body: dict[str, Any], scope: CacheScope | None) -> tuple[dict[str, Any], str | None]:
    """The client's body with the owned fields stripped or set, and the salt
    it carries to the engine. ``scope`` None: the gateway does not decide the
    salt (no keys, or isolation off), the client's goes as sent."""
    sent = client_salt(body)
    salt = sent if scope is None else salt_for(scope, sent)
    owned = {name: value for name, value in body.items() if name not in OWNED_FIELDS}
    if salt is not None:
        owned[SALT] = salt
    return owned, salt
