"""Keys through the pipeline, in-process: who may ask, for what, how much —
and that a refused request never reaches the engine."""

from pathlib import Path

import pytest

from tests.support.asgi import in_process_gateway
from tests.support.keys import key_entry, write_keys_file
from tests.support.scripted_engine import DONE, MODEL, chunk, usage_chunk

COMPLETIONS = "/v1/completions"
BODY = {"model": MODEL, "prompt": "hello", "max_tokens": 10}


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    acme = key_entry(
        "acme-1",
        "acme",
        "key-acme",
        priorities=("normal", "low"),
        tokens_per_minute=100,
        requests_per_minute=50,
    )
    globex = key_entry("globex-1", "globex", "key-globex", priorities=("high", "normal"))
    return write_keys_file(tmp_path / "keys.yaml", [acme, globex])


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_no_key_or_a_wrong_one_is_401_and_the_engine_sees_nothing(keys_file: Path) -> None:
    async with in_process_gateway(keys_file=keys_file) as gateway:
        for headers in ({}, bearer("nope"), {"authorization": "key-acme"}):
            exchange = await gateway.request(COMPLETIONS, BODY, headers=headers).done()
            assert exchange.status == 401
            assert exchange.json()["error"]["code"] == "invalid_api_key"
        assert gateway.metric("gateway_rejections_total", reason="unauthorized") == 3
        assert gateway.metric("gateway_tenant_rejections_total") == 0
        assert gateway.engine.calls.empty()


async def test_a_priority_the_key_may_not_use_is_403(keys_file: Path) -> None:
    async with in_process_gateway(keys_file=keys_file) as gateway:
        headers = {**bearer("key-acme"), "x-priority": "high"}
        exchange = await gateway.request(COMPLETIONS, BODY, headers=headers).done()
        assert exchange.status == 403
        assert gateway.metric("gateway_tenant_rejections_total", tenant="acme") == 1
        assert gateway.engine.calls.empty()


async def test_the_key_sets_the_tenant_and_its_limits_answer_like_openai(keys_file: Path) -> None:
    async with in_process_gateway(keys_file=keys_file) as gateway:
        headers = {**bearer("key-acme"), "x-tenant-id": "not-acme"}
        first = gateway.request(COMPLETIONS, {**BODY, "max_tokens": 60}, headers=headers)
        call = await gateway.engine.calls.get()
        call.answer(200, {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 60}})
        await first.done()
        assert first.status == 200
        assert first.headers["x-ratelimit-limit-tokens"] == "100"
        assert int(first.headers["x-ratelimit-remaining-tokens"]) < 40
        # The next worst case does not fit what is left of the window.
        second = await gateway.request(
            COMPLETIONS, BODY | {"max_tokens": 60}, headers=headers
        ).done()
        assert second.status == 429
        error = second.json()["error"]
        assert (error["code"], error["type"]) == ("rate_limit_exceeded", "tokens")
        assert int(second.headers["retry-after"]) >= 1
        assert second.headers["x-ratelimit-limit-tokens"] == "100"
        assert (
            gateway.metric("gateway_tenant_rejections_total", tenant="acme", reason="rate_limited")
            == 1
        )
        assert gateway.metric("gateway_tenant_tokens_total", tenant="acme", kind="used") == 63
        assert gateway.metric("gateway_tenant_tokens_total", tenant="not-acme") == 0


async def test_a_cancelled_stream_pays_for_what_it_was_sent(keys_file: Path) -> None:
    async with in_process_gateway(keys_file=keys_file) as gateway:
        headers = bearer("key-acme")
        exchange = gateway.request(COMPLETIONS, {**BODY, "stream": True}, headers=headers)
        call = await gateway.engine.calls.get()
        call.stream()
        call.send(chunk("a") + chunk("b") + chunk("c"))
        await exchange.wait_for(lambda e: e.body.count(b'"text"') >= 3)
        exchange.disconnect()
        await exchange.done()
        used = gateway.metric("gateway_tenant_tokens_total", tenant="acme", kind="used")
        # The prompt (estimated: no usage chunk came) and the three tokens sent.
        assert 3 < used < 10
        assert gateway.settled()


async def test_a_completed_stream_pays_its_usage(keys_file: Path) -> None:
    async with in_process_gateway(keys_file=keys_file) as gateway:
        exchange = gateway.request(
            COMPLETIONS, {**BODY, "stream": True}, headers=bearer("key-acme")
        )
        call = await gateway.engine.calls.get()
        call.stream()
        call.send(chunk("a") + usage_chunk(4, 1) + DONE)
        call.end()
        await exchange.done()
        assert exchange.headers["x-ratelimit-limit-tokens"] == "100"
        assert gateway.metric("gateway_tenant_tokens_total", tenant="acme", kind="used") == 5


async def test_metrics_only_on_the_admin_port_health_on_both() -> None:
    async with in_process_gateway(admin_port=9100) as gateway:

        async def get(path: str, port: int) -> int | None:
            exchange = gateway.request(path, b"", method="GET", port=port)
            return (await exchange.done()).status

        assert await get("/metrics", 8000) == 404
        assert await get("/metrics", 9100) == 200
        assert await get("/health/live", 8000) == 200
        assert await get("/health/live", 9100) == 200
        assert await get("/v1/models", 9100) == 404
        assert await get("/v1/models", 8000) == 200
