"""The models a key may call (``models`` in the keys file): another
tenant's LoRA adapter is, to a key that may not call it, a model that does
not exist — refused as such on every route, unlisted, and never sent to an
engine; a key without the field calls everything."""

import asyncio
from pathlib import Path
from typing import Any

import pytest

from app.keys.file import KeyEntry
from tests.support.asgi import InProcessGateway, in_process_gateway
from tests.support.keys import key_entry, write_keys_file
from tests.support.scripted_engine import MODEL, ScriptedEngine

ADAPTERS = {"acme-sql": MODEL, "acme-poem": MODEL, "globex-sql": MODEL}


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    acme = key_entry("acme-1", "acme", "key-acme", models=(MODEL, "acme-*"))
    admin = key_entry("admin-1", "ops", "key-admin")
    return write_keys_file(tmp_path / "keys.yaml", [acme, admin])


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def listed(gateway: InProcessGateway, key: str) -> set[str]:
    answer = await gateway.request("/v1/models", b"", method="GET", headers=bearer(key)).done()
    assert answer.status == 200
    return {m["id"] for m in answer.json()["data"]}


async def test_a_key_sees_and_calls_only_its_models(keys_file: Path) -> None:
    engine = ScriptedEngine(adapters=ADAPTERS)
    async with in_process_gateway(engine, keys_file=keys_file) as gateway:
        assert await listed(gateway, "key-acme") == {MODEL, "acme-sql", "acme-poem"}
        assert await listed(gateway, "key-admin") == {MODEL, *ADAPTERS}
        calls: list[tuple[str, dict[str, Any]]] = [
            ("/v1/completions", {"model": "globex-sql", "prompt": "hi", "max_tokens": 4}),
            ("/tokenize", {"model": "globex-sql", "prompt": "hi"}),
        ]
        for path, body in calls:
            # Bounded: were it sent on, the scripted engine would hold it.
            exchange = gateway.request(path, body, headers=bearer("key-acme"))
            refused = await asyncio.wait_for(exchange.done(), timeout=30)
            assert refused.status == 404, refused.body
            error = refused.json()["error"]
            assert error["code"] == "model_not_found"
            assert "globex-sql" in error["message"]
            # Not even its name among those said to be available.
            assert "globex-sql" not in error["message"].partition("available")[2]
        one = await gateway.request(
            "/v1/models/globex-sql", b"", method="GET", headers=bearer("key-acme")
        ).done()
        assert one.status == 404
        assert gateway.engine.calls.empty()
        assert gateway.engine.requests["/v1/completions"] == 0
        assert gateway.engine.requests["/tokenize"] == 0


def test_patterns_and_names_decide_and_no_field_allows_all() -> None:
    entry = {"id": "k", "tenant": "t", "sha256": "0" * 64}
    acme = KeyEntry.model_validate({**entry, "models": ["tiny", "acme-*"]})
    assert [acme.may_call(m) for m in ("tiny", "acme-sql", "globex-sql", "tiny2")] == [
        True,
        True,
        False,
        False,
    ]
    assert KeyEntry.model_validate(entry).may_call("anything")
    assert not KeyEntry.model_validate({**entry, "models": []}).may_call("tiny")
    with pytest.raises(ValueError, match="may not be empty"):
        KeyEntry.model_validate({**entry, "models": ["tiny", " "]})


async def test_a_key_calls_an_alias_it_may_call_whatever_the_served_name(keys_file: Path) -> None:
    """``acme-latest`` is acme's, though the adapter behind it is named
    otherwise; ``globex-latest`` is not, whatever it leads to."""
    engine = ScriptedEngine(adapters=ADAPTERS)
    aliases = "acme-latest=globex-sql,globex-latest=acme-sql"
    async with in_process_gateway(engine, keys_file=keys_file, model_aliases=aliases) as gateway:
        assert await listed(gateway, "key-acme") == {MODEL, "acme-sql", "acme-poem", "acme-latest"}
        body = {"model": "acme-latest", "prompt": "hi", "max_tokens": 2}
        exchange = gateway.request("/v1/completions", body, headers=bearer("key-acme"))
        call = await asyncio.wait_for(engine.calls.get(), timeout=30)
        assert call.body["model"] == "globex-sql"
        call.answer(200, {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
        assert (await exchange.done()).status == 200
        refused = gateway.request(
            "/v1/completions", {**body, "model": "globex-latest"}, headers=bearer("key-acme")
        )
        assert (await asyncio.wait_for(refused.done(), timeout=30)).status == 404
        assert engine.calls.empty()
