"""The fields that are the gateway's to decide (``app.request.owned_fields``): each
stripped or salted as the engine's body is built, through ``check_request``;
then what a scripted engine is sent through the gateway in-process, with keys
on (the body's exact fields are what no real engine shows; what the salt does
to the real engine's prefix cache is tests/e2e/test_owned_fields.py's)."""

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from app.request.errors import InvalidRequest
from app.request.owned_fields import ENGINE_XARGS, OWNED_FIELDS, SALT, CacheScope
from app.request.validation import CompletionJob, Limits, check_request
from tests.support.asgi import in_process_gateway
from tests.support.keys import key_entry, write_keys_file
from tests.support.scripted_engine import MODEL

CHAT: dict[str, Any] = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
ACME = CacheScope("acme")
SHARED = CacheScope(None)


def check(body: dict[str, Any], scope: CacheScope | None) -> CompletionJob:
    return check_request("chat", body, {"tiny": 2048}, Limits(max_n=4, max_batch=4), "1.1", scope)


def sent(job: CompletionJob) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(job.upstream_body)
    return body


def tenant_salt(tenant: str) -> str:
    return hashlib.sha256(tenant.encode()).hexdigest()[:32]


@pytest.mark.parametrize("scope", [ACME, SHARED, None], ids=["tenant", "shared", "client's"])
@pytest.mark.parametrize("name", sorted(OWNED_FIELDS))
def test_no_owned_field_reaches_the_engine_as_the_client_sent_it_when_the_gateway_decides(
    name: str, scope: CacheScope | None
) -> None:
    rule = OWNED_FIELDS[name]
    # A filtered field is an object: the keys the gateway owns in it go.
    value: object = {key: "from-the-client" for key in ENGINE_XARGS}
    if rule != "filtered":
        value = "from-the-client"
    job = check({**CHAT, name: value, "temperature": 0.5}, scope)
    if scope is None and rule == "salted":
        # Nothing for the gateway to decide: the client's own salt.
        assert sent(job)[name] == "from-the-client"
    else:
        assert sent(job).get(name) != value
    assert sent(job)["temperature"] == 0.5


def test_the_engines_priority_and_request_id_are_stripped() -> None:
    job = check({**CHAT, "priority": -1000, "request_id": "chosen-by-the-client"}, None)
    assert "priority" not in sent(job)
    assert "request_id" not in sent(job)
    assert sent(job)["messages"] == CHAT["messages"]


def test_pd_transfer_parameters_are_stripped_and_xargs_keep_only_the_clients_own() -> None:
    xargs = {"my_processor": 3, "session_id": "s-1", "kv_cache_report_mode": "full"}
    job = check(
        {
            **CHAT,
            "kv_transfer_params": {"do_remote_prefill": True, "remote_host": "10.0.0.9"},
            "ec_transfer_params": {"remote_host": "10.0.0.9"},
            "vllm_xargs": {**xargs, "kv_transfer_params": "x", "ec_transfer_params": "y"},
            "session_id": "s-1",
        },
        None,
    )
    assert "kv_transfer_params" not in sent(job)
    assert "ec_transfer_params" not in sent(job)
    assert sent(job)["vllm_xargs"] == {"my_processor": 3, "session_id": "s-1"}
    assert sent(job)["session_id"] == "s-1"
    only_owned = check({**CHAT, "vllm_xargs": {"kv_cache_report_mode": "full"}}, None)
    assert "vllm_xargs" not in sent(only_owned)


def test_xargs_that_are_not_an_object_are_a_400() -> None:
    with pytest.raises(InvalidRequest) as caught:
        check({**CHAT, "vllm_xargs": ["kv_cache_report_mode"]}, None)
    assert caught.value.param == "vllm_xargs"


def test_a_tenants_requests_are_salted_by_its_name_the_same_everywhere() -> None:
    job = check(CHAT, ACME)
    assert sent(job)[SALT] == job.cache_salt == tenant_salt("acme")
    assert check(CHAT, CacheScope("globex")).cache_salt == tenant_salt("globex")
    assert tenant_salt("acme") != tenant_salt("globex")


def test_a_clients_own_salt_splits_its_tenant_never_reaches_another() -> None:
    own = check({**CHAT, SALT: "user-1"}, ACME).cache_salt
    assert own not in (None, "user-1", tenant_salt("acme"))
    assert own == check({**CHAT, SALT: "user-1"}, ACME).cache_salt
    assert own != check({**CHAT, SALT: "user-2"}, ACME).cache_salt
    assert own != check({**CHAT, SALT: "user-1"}, CacheScope("globex")).cache_salt
    # A salt that names another tenant's is folded like any other.
    forged = check({**CHAT, SALT: tenant_salt("globex")}, ACME).cache_salt
    assert forged != tenant_salt("globex")


def test_a_sharing_key_sends_no_salt_unless_its_client_does() -> None:
    assert SALT not in sent(check(CHAT, SHARED))
    assert check(CHAT, SHARED).cache_salt is None
    own = check({**CHAT, SALT: tenant_salt("acme")}, SHARED).cache_salt
    assert own not in (None, tenant_salt("acme"))


def test_without_the_gateway_deciding_the_clients_salt_goes_as_sent() -> None:
    assert check({**CHAT, SALT: "user-1"}, None).cache_salt == "user-1"
    assert SALT not in sent(check(CHAT, None))
    assert SALT not in sent(check({**CHAT, SALT: None}, None))


@pytest.mark.parametrize("scope", [ACME, None], ids=["salted", "as sent"])
@pytest.mark.parametrize("salt", ["", 5, "a/b", "a@b", "a\\b", "a\0b", "x" * 129])
def test_a_salt_the_engine_would_refuse_is_a_400(salt: object, scope: CacheScope | None) -> None:
    with pytest.raises(InvalidRequest) as caught:
        check({**CHAT, SALT: salt}, scope)
    assert caught.value.status == 400
    assert caught.value.param == SALT


async def test_through_the_gateway_with_keys_on(tmp_path: Path) -> None:
    entries = [
        key_entry("acme-1", "acme", "key-acme"),
        {**key_entry("fleet", "globex", "key-fleet"), "shared_prefix_cache": True},
    ]
    keys = write_keys_file(tmp_path / "keys.yaml", entries)
    body = {"model": MODEL, "messages": CHAT["messages"], "priority": -5, "request_id": "mine"}
    async with in_process_gateway(keys_file=keys) as gateway:
        salts = []
        for key in ("key-acme", "key-fleet"):
            headers = {"authorization": f"Bearer {key}", "x-request-id": "mine"}
            exchange = gateway.request("/v1/chat/completions", body, headers=headers)
            call = await gateway.engine.calls.get()
            assert "priority" not in call.body
            assert "request_id" not in call.body
            assert call.headers["x-request-id"] != "mine"
            salts.append(call.body.get(SALT))
            call.answer(200, {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
            assert (await exchange.done()).status == 200
        assert salts == [tenant_salt("acme"), None]
