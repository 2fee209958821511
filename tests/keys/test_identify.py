"""Who a request is for: the key decides when keys are on, the headers when
they are off; a header that names no tenant or priority is a 400 in OpenAI's
shape before any engine is asked (in-process, at the end). Two
``Authorization`` headers are refused, never served as either key's tenant;
a key's cache scope is its tenant's unless it shares."""

import asyncio
import json
from pathlib import Path

import pytest
from starlette.datastructures import Headers

from app.keys.file import KeyEntry
from app.keys.identify import cache_scope, identify
from app.keys.ring import KeyRing, hash_key
from app.request.errors import Forbidden, InvalidRequest, Unauthorized
from app.request.identity import Identity
from app.request.owned_fields import CacheScope
from tests.support.asgi import Exchange, in_process_gateway
from tests.support.keys import key_entry, write_keys_file
from tests.support.scripted_engine import MODEL

BATCH = KeyEntry(
    id="acme-batch", tenant="acme", sha256=hash_key("k1"), priorities=("normal", "low")
)
LOW_ONLY = KeyEntry(id="bg", tenant="globex", sha256=hash_key("k2"), priorities=("low",))
RING = KeyRing([BATCH, LOW_ONLY])


def test_without_keys_the_headers_decide() -> None:
    identity, key = identify(Headers({"x-tenant-id": "t1", "x-priority": "HIGH"}), None)
    assert identity == Identity("t1", "high")
    assert key is None
    assert identify(Headers({}), None)[0] == Identity("anonymous", "normal")
    with pytest.raises(InvalidRequest):
        identify(Headers({"x-tenant-id": "a b"}), None)
    with pytest.raises(InvalidRequest):
        identify(Headers({"x-priority": "urgent"}), None)


def test_with_keys_the_key_decides_the_tenant() -> None:
    headers = {"authorization": "Bearer k1", "x-tenant-id": "someone-else"}
    identity, key = identify(Headers(headers), RING)
    assert identity == Identity("acme", "normal", "acme-batch")
    assert key == BATCH


def test_a_key_without_normal_defaults_to_its_first_priority() -> None:
    assert identify(Headers({"authorization": "Bearer k2"}), RING)[0].priority == "low"


@pytest.mark.parametrize(
    "authorization", [None, "", "Bearer", "Bearer ", "Basic k1", "Bearer wrong", "k1"]
)
def test_missing_or_wrong_keys_are_401_and_never_echoed(authorization: str | None) -> None:
    headers = {} if authorization is None else {"authorization": authorization}
    with pytest.raises(Unauthorized) as caught:
        identify(Headers(headers), RING)
    assert caught.value.status == 401
    assert caught.value.code == "invalid_api_key"
    assert "wrong" not in caught.value.message


@pytest.mark.parametrize(
    "values",
    [("Bearer k1", "Bearer k1"), ("Bearer k1", "Bearer k2"), ("Bearer k1", "Bearer wrong")],
    ids=["equal", "two keys", "a key and a wrong one"],
)
def test_two_authorization_headers_are_400_whatever_they_say(values: tuple[str, str]) -> None:
    raw = [(b"authorization", value.encode()) for value in values]
    with pytest.raises(InvalidRequest) as caught:
        identify(Headers(raw=raw), RING)
    assert type(caught.value) is InvalidRequest
    assert caught.value.status == 400
    assert caught.value.param == "Authorization"
    assert "k1" not in caught.value.message


def test_x_api_key_presents_a_key_as_authorization_does() -> None:
    """As the ``anthropic`` SDK sends it."""
    identity, key = identify(Headers({"x-api-key": "k1"}), RING)
    assert (identity.tenant, key) == ("acme", BATCH)
    with pytest.raises(Unauthorized) as caught:
        identify(Headers({"x-api-key": "wrong"}), RING)
    assert caught.value.param == "x-api-key"
    assert "wrong" not in caught.value.message


def test_both_headers_saying_the_same_key_are_that_key() -> None:
    headers = {"authorization": "Bearer k1", "x-api-key": "k1"}
    assert identify(Headers(headers), RING)[1] == BATCH


@pytest.mark.parametrize(
    "raw",
    [
        [(b"authorization", b"Bearer k1"), (b"x-api-key", b"k2")],
        [(b"authorization", b"Basic k1"), (b"x-api-key", b"k1")],
        [(b"authorization", b"Bearer wrong"), (b"x-api-key", b"k1")],
        [(b"x-api-key", b"k1"), (b"x-api-key", b"k1")],
        [(b"x-api-key", b"k1"), (b"x-api-key", b"k2")],
    ],
    ids=["two keys", "another scheme", "a wrong bearer", "x-api-key twice", "two x-api-keys"],
)
def test_a_key_presented_twice_in_different_words_is_400(raw: list[tuple[bytes, bytes]]) -> None:
    """Which of them a proxy in front reads may differ: neither is served."""
    with pytest.raises(InvalidRequest) as caught:
        identify(Headers(raw=raw), RING)
    assert caught.value.status == 400


def test_a_key_is_kept_to_its_tenants_prefix_cache_unless_it_shares() -> None:
    shares = BATCH.model_copy(update={"shared_prefix_cache": True})
    assert cache_scope(BATCH, "tenant") == CacheScope("acme")
    assert cache_scope(shares, "tenant") == CacheScope(None)
    # Isolation off, or no keys (tenants only claimed): the client's salt.
    assert cache_scope(BATCH, "off") is None
    assert cache_scope(None, "tenant") is None


def test_a_priority_the_key_may_not_use_is_403() -> None:
    with pytest.raises(Forbidden) as caught:
        identify(Headers({"authorization": "Bearer k1", "x-priority": "high"}), RING)
    assert caught.value.status == 403
    assert "normal, low" in caught.value.message


HEADER_CASES = [
    # (name, extra headers, status, param)
    ("bad priority", {"X-Priority": "urgent"}, 400, "X-Priority"),
    ("bad tenant", {"X-Tenant-Id": "a b"}, 400, "X-Tenant-Id"),
]


@pytest.mark.parametrize(
    ("name", "headers", "status", "param"), HEADER_CASES, ids=[case[0] for case in HEADER_CASES]
)
async def test_bad_requests_get_their_documented_status(
    name: str, headers: dict[str, str], status: int, param: str
) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    async with in_process_gateway() as gateway:
        exchange = await gateway.request("/v1/chat/completions", body, headers=headers).done()
        assert exchange.status == status, exchange.body
        error = exchange.json()["error"]
        assert set(error) >= {"message", "type", "param", "code"}
        assert error["message"]
        assert error["param"] == param
        assert gateway.metric("gateway_requests_total", outcome="rejected") == 1
        assert gateway.engine.calls.empty()


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/models"])
async def test_two_authorization_headers_never_reach_the_engine(tmp_path: Path, path: str) -> None:
    keys = write_keys_file(tmp_path / "keys.yaml", [key_entry("acme-1", "acme", "key-acme")])
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    headers = [
        (b"content-type", b"application/json"),
        (b"authorization", b"Bearer key-acme"),
        (b"authorization", b"Bearer key-acme"),
    ]
    async with in_process_gateway(keys_file=keys) as gateway:
        method = "POST" if path.endswith("completions") else "GET"
        exchange = Exchange(gateway.app, gateway.state, path, headers, "1.1", method)
        exchange.send_body(json.dumps(body).encode() if method == "POST" else b"")
        # Whichever comes first: the answer, or the request at the engine.
        served = asyncio.create_task(gateway.engine.calls.get())
        await asyncio.wait({exchange.task, served}, return_when=asyncio.FIRST_COMPLETED)
        served.cancel()
        assert exchange.task.done(), "the request reached the engine"
        assert exchange.status == 400, exchange.body
        error = exchange.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["param"] == "Authorization"
        assert gateway.metric("gateway_tenant_tokens", tenant="acme") == 0
        assert gateway.engine.calls.empty()
