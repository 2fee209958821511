"""Who a request is for, from its headers.

With keys configured, the key decides: ``Authorization: Bearer <key>``, or
``x-api-key: <key>`` as the ``anthropic`` SDK sends it (on every route), is
looked up by its hash, the tenant is the key's (``X-Tenant-Id`` cannot change
it), and ``X-Priority`` may only name a priority the key allows (without the
header: ``normal`` if allowed, else the key's first). Without keys, the
tenant comes from ``X-Tenant-Id`` (default ``anonymous``) and any priority
may be asked for.

A request may ask for a TTFT objective tighter than its class's
(``x-slo-ttft-ms``, or llm-d's ``x-llm-d-slo-ttft-ms``: whole milliseconds);
its key may bound it too (``ttft_objective_ms``). The tightest counts; a
value that is not a positive whole number is a 400 naming its header.

A request that presents its key twice is refused unless both say the
same key: two ``Authorization`` headers whatever they say, two
``x-api-key`` headers, or an ``Authorization`` and an ``x-api-key`` that
differ (a bearer that is not the same key, or another scheme). Reading one
of them would serve the request as that key's tenant, and which one a proxy
in front reads may differ.
"""

from typing import Literal

from starlette.datastructures import Headers

from app.keys.file import KeyEntry
from app.keys.ring import KeyRing
from app.request.errors import Forbidden, InvalidRequest, Unauthorized
from app.request.identity import (
    ANONYMOUS,
    DEFAULT_PRIORITY,
    TENANT_PATTERN,
    Identity,
    parse_priority,
)
from app.request.owned_fields import CacheScope

_BEARER = "bearer "
# The ASGI scope key of a request identified before it came (a batch's line,
# run in process as its batch's owner: ``app.batch.call``). A scope key, not
# a header: no client can set it.
IDENTIFIED = "vllm_gateway.identified"
# The headers a request asks for its TTFT objective in, whole milliseconds.
OBJECTIVE_HEADERS = ("x-slo-ttft-ms", "x-llm-d-slo-ttft-ms")


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
        return Identity(tenant, priority, objective=asked_objective(headers)), None
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
    objective = tightest(asked_objective(headers), entry.ttft_objective_ms)
    return Identity(entry.tenant, priority, entry.id, objective), entry


def asked_objective(headers: Headers) -> float | None:
    """The tightest TTFT objective the headers ask for, seconds (None: none)."""
    asked: float | None = None
    for name in OBJECTIVE_HEADERS:
        for value in headers.getlist(name):
            text = value.strip()
            if not text.isdigit() or int(text) <= 0:
                raise InvalidRequest(
                    f"{name}: a whole number of milliseconds above 0, not {value[:32]!r}",
                    param=name,
                )
            asked = tightest(asked, int(text))
    return asked


def tightest(seconds: float | None, milliseconds: int | None) -> float | None:
    """The tighter of an objective in seconds and one in milliseconds."""
    if milliseconds is None:
        return seconds
    given = milliseconds / 1000
    return given if seconds is None else min(seconds, given)


def authenticate(headers: Headers, ring: KeyRing) -> KeyEntry:
    """The key presented in ``Authorization`` or ``x-api-key``, or
    ``Unauthorized``. The message never repeats what was presented."""
    key, param = presented_key(headers)
    if key is None:
        raise Unauthorized(
            "no API key: send it as `Authorization: Bearer <key>` or `x-api-key: <key>`",
            param="Authorization",
        )
    entry = ring.lookup(key)
    if entry is None:
        raise Unauthorized("incorrect API key provided", param=param)
    return entry


def presented_key(headers: Headers) -> tuple[str | None, str]:
    """The key a request presents, and the header it came in; a request
    that presents two keys, or one twice in different words, is refused."""
    authorizations, api_keys = headers.getlist("authorization"), headers.getlist("x-api-key")
    if len(authorizations) > 1:
        raise InvalidRequest(
            "two Authorization headers; send one, `Authorization: Bearer <key>`",
            param="Authorization",
        )
    if len(api_keys) > 1:
        raise InvalidRequest("two x-api-key headers; send one", param="x-api-key")
    bearer = _bearer(authorizations[0]) if authorizations else None
    api_key = api_keys[0].strip() or None if api_keys else None
    if authorizations and api_keys and bearer != api_key:
        raise InvalidRequest(
            "Authorization and x-api-key present different keys; send one of them",
            param="x-api-key",
        )
    if bearer is not None:
        return bearer, "Authorization"
    return api_key, "x-api-key"


def _bearer(value: str) -> str | None:
    if value[: len(_BEARER)].lower() != _BEARER:
        return None
    return value[len(_BEARER) :].strip() or None


def cache_scope(key: KeyEntry | None, isolation: Literal["tenant", "off"]) -> CacheScope | None:
    """Whose engine prefix cache a request may share: with keys on and
    isolation by tenant, its tenant's, or every sharing key's for a key that
    shares; None (the client's salt goes as sent) without keys, where a
    tenant is only claimed, or with isolation off."""
    if key is None or isolation == "off":
        return None
    return CacheScope(None if key.shared_prefix_cache else key.tenant)
