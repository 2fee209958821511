"""Who a request is for, from its headers.

With keys configured, the key decides: ``Authorization: Bearer <key>`` is
looked up by its hash, the tenant is the key's (``X-Tenant-Id`` cannot change
it), and ``X-Priority`` may only name a priority the key allows (without the
header: ``normal`` if allowed, else the key's first). Without keys, the
tenant comes from ``X-Tenant-Id`` (default ``anonymous``) and any priority
may be asked for.

A request with two ``Authorization`` headers is refused whatever they say:
reading one of them would serve the request as that key's tenant, and which
one a proxy in front reads may differ.
"""

from typing import Literal

from starlette.datastructures import Headers

from app.errors import Forbidden, InvalidRequest, Unauthorized
from app.identity import ANONYMOUS, DEFAULT_PRIORITY, TENANT_PATTERN, Identity, parse_priority
from app.keys.file import KeyEntry
from app.keys.ring import KeyRing
from app.owned_fields import CacheScope

_BEARER = "bearer "


def identify(headers: Headers, ring: KeyRing | None) -> tuple[Identity, KeyEntry | None]:
    asked = headers.get("x-priority")
    priority = parse_priority(asked)
    if priority is None:
        raise InvalidRequest("X-Priority: one of high, normal, low", param="X-Priority")
    if ring is None:
        tenant = headers.get("x-tenant-id") or ANONYMOUS
        if not TENANT_PATTERN.fullmatch(tenant):
            raise InvalidRequest(
                "X-Tenant-Id: 1 to 64 letters, digits or ._:@-", param="X-Tenant-Id"
            )
        return Identity(tenant, priority), None
    entry = authenticate(headers, ring)
    if asked is None:
        priority = DEFAULT_PRIORITY if DEFAULT_PRIORITY in entry.priorities else entry.priorities[0]
    elif priority not in entry.priorities:
        allowed = ", ".join(entry.priorities)
        raise Forbidden(
            f"the key {entry.id} may not use priority {priority}; it may use: {allowed}",
            tenant=entry.tenant,
            key_id=entry.id,
            param="X-Priority",
        )
    return Identity(entry.tenant, priority, entry.id), entry


def authenticate(headers: Headers, ring: KeyRing) -> KeyEntry:
    """The key presented in ``Authorization``, or ``Unauthorized``. The
    message never repeats what was presented."""
    if len(headers.getlist("authorization")) > 1:
        raise InvalidRequest(
            "two Authorization headers; send one, `Authorization: Bearer <key>`",
            param="Authorization",
        )
    value = headers.get("authorization") or ""
    if not value[: len(_BEARER)].lower() == _BEARER or not value[len(_BEARER) :].strip():
        raise Unauthorized(
            "no API key: send it as `Authorization: Bearer <key>`", param="Authorization"
        )
    entry = ring.lookup(value[len(_BEARER) :].strip())
    if entry is None:
        raise Unauthorized("incorrect API key provided", param="Authorization")
    return entry


def cache_scope(key: KeyEntry | None, isolation: Literal["tenant", "off"]) -> CacheScope | None:
    """Whose engine prefix cache a request may share: with keys on and
    isolation by tenant, its tenant's, or every sharing key's for a key that
    shares; None (the client's salt goes as sent) without keys, where a
    tenant is only claimed, or with isolation off."""
    if key is None or isolation == "off":
        return None
    return CacheScope(None if key.shared_prefix_cache else key.tenant)
