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

vLLM's other request fields were weighed too; those passed as sent are the
client's own business (see ``PASSED_FIELDS``).
"""

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

from app.request.errors import InvalidRequest

SALT = "cache_salt"

Rule = Literal["stripped", "salted", "set", "filtered"]

OWNED_FIELDS: dict[str, Rule] = {
    # vLLM's own scheduling priority (under --scheduling-policy priority,
    # lower runs first): a client could jump the engine's queue past the
    # gateway's priority classes, which come from the key and X-Priority and
    # which admission enforces.
    "priority": "stripped",
    # The engine's request id is the gateway's (``engine_request_id``, sent
    # as X-Request-Id): it aborts, logs and charges by it. vLLM 0.32 takes
    # the header over this field (``_base_request_id``) on every route but
    # the Responses API, where the field is the response's id: there the
    # gateway sets it (``resp_`` and its own id), so that it knows which
    # engine holds the response before the engine answers. Passed as sent,
    # two clients sending the same id would collide in the engine.
    "request_id": "set",
    # The tenant's prefix-cache salt, with keys on (see ``CacheScope``);
    # without keys, or with isolation off, as the client sent it. vLLM's
    # embeddings take no salt: stripped there.
    SALT: "salted",
    # Disaggregated prefill (P/D): which remote instance holds a prompt's KV
    # blocks and which blocks to pull or push. It is what a P/D orchestrator
    # sets, never a client: one sent as written could make the engine pull
    # blocks from a host the client names, or another request's blocks. The
    # gateway runs no P/D.
    "kv_transfer_params": "stripped",
    # The same for the encoder cache (E/P/D).
    "ec_transfer_params": "stripped",
    # Extra arguments for the deployment's own sampling plug-ins: passed,
    # but for the keys the engine reads from the same place for itself
    # (``ENGINE_XARGS``).
    "vllm_xargs": "filtered",
}

# Keys of ``vllm_xargs`` the engine reads as its own settings (vLLM 0.32's
# ``Request``): the transfer parameters above by another road, and
# ``kv_cache_report_mode`` ("full" makes the engine publish a KV event for
# every cached block it reuses, which a client must not turn on for the
# fleet's KV-event consumers).
ENGINE_XARGS = frozenset({"kv_transfer_params", "ec_transfer_params", "kv_cache_report_mode"})

# Fields weighed and left to the client, and why.
PASSED_FIELDS: dict[str, str] = {
    "session_id": "a label vLLM only copies into its KV events; it changes no scheduling or"
    " caching (a consumer of those events must not trust it across tenants)",
    "stream_interval": "tokens per streamed chunk: the client's latency trade; a cancelled"
    " stream is charged its engine-reported usage, not its chunks",
    "store": "whether the engine keeps a response (only with VLLM_ENABLE_RESPONSES_API_STORE):"
    " the operator's engine setting decides",
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


def owned_body(
    body: dict[str, Any],
    scope: CacheScope | None,
    *,
    salted: bool = True,
    request_id: str | None = None,
) -> tuple[dict[str, Any], str | None]:
    """The client's body with the owned fields stripped or set, and the salt
    it carries to the engine. ``scope`` None: the gateway does not decide the
    salt (no keys, or isolation off), the client's goes as sent. ``salted``
    False: the route takes no salt (embeddings). ``request_id``: the id the
    engine is to give the request (the Responses API's response id)."""
    sent = client_salt(body)
    salt = None if not salted else sent if scope is None else salt_for(scope, sent)
    owned = {name: value for name, value in body.items() if name not in OWNED_FIELDS}
    xargs = body.get("vllm_xargs")
    if isinstance(xargs, dict):
        kept = {key: value for key, value in xargs.items() if key not in ENGINE_XARGS}
        if kept:
            owned["vllm_xargs"] = kept
    elif xargs is not None:
        raise InvalidRequest("vllm_xargs: must be an object", param="vllm_xargs")
    if request_id is not None:
        owned["request_id"] = request_id
    if salt is not None:
        owned[SALT] = salt
    return owned, salt
