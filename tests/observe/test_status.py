"""``/status`` (``app.observe.status``): the gateway's state without Prometheus, on
the admin port only."""

import asyncio
from pathlib import Path
from typing import Any

from app import __version__
from tests.support.asgi import InProcessGateway, in_process_gateway
from tests.support.keys import new_key, write_keys_file
from tests.support.scripted_engine import MAX_MODEL_LEN, MODEL, ScriptedEngine
from tests.support.wait import wait_for

ADMIN = 9100
BODY = {"model": MODEL, "prompt": "hello", "max_tokens": 8}
ANSWER = {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}


async def _get(gateway: InProcessGateway, path: str, port: int) -> tuple[int | None, Any]:
    exchange = await gateway.request(path, b"", method="GET", port=port).done()
    return exchange.status, exchange.json()


async def test_status_is_served_on_the_admin_port_only() -> None:
    async with in_process_gateway(admin_port=ADMIN) as gateway:
        assert (await _get(gateway, "/status", ADMIN))[0] == 200
        assert (await _get(gateway, "/status", 8000))[0] == 404
    # No admin port: it names tenants, so it is not served at all.
    async with in_process_gateway() as gateway:
        assert (await _get(gateway, "/status", 8000))[0] == 404


async def test_status_shows_the_engines_budget_and_the_queue_by_tenant(tmp_path: Path) -> None:
    engine = ScriptedEngine(kv_blocks=24, block_size=16)
    key, entry = new_key("k1", "acme")
    keys = write_keys_file(tmp_path / "keys.yml", [entry])
    auth = {"authorization": f"Bearer {key}"}
    async with in_process_gateway(
        engine, admin_port=ADMIN, max_concurrency=1, keys_file=keys
    ) as gateway:
        running = gateway.request("/v1/completions", BODY, headers=auth)
        call = await asyncio.wait_for(engine.calls.get(), timeout=30)
        waiting = gateway.request("/v1/completions", BODY, headers=auth)
        assert await wait_for(lambda: gateway.metric("gateway_queue_depth") == 1, timeout=30)

        status, body = await _get(gateway, "/status", ADMIN)
        assert status == 200
        assert body["version"] == __version__
        assert (body["admission"], body["draining"]) == ("on", False)
        (seen,) = body["engines"]
        assert [seen["url"]] == list(gateway.services.engines.monitors)
        assert (seen["routable"], seen["ejected"]) == (True, False)
        assert seen["models"] == {MODEL: MAX_MODEL_LEN}
        assert seen["capacity_tokens"] == 24 * 16
        assert seen["budget_tokens"] > 0
        assert seen["overcommit"] > 0
        assert (seen["in_flight"], seen["max_sequences"]) == (1, 1)
        assert seen["reserved_tokens"] > 0
        # What the engine's own /metrics said (this one publishes no
        # running and waiting counts: unknown, not 0).
        assert seen["engine"] == {
            "running": None,
            "waiting": None,
            "kv_usage": 0.0,
            "preemptions_total": 0.0,
        }
        assert body["queue"]["depth"] == 1
        assert body["queue"]["by_tenant"] == {"acme": 1}
        assert body["queue"]["by_priority"]["normal"] == 1
        assert body["keys"]["keys"] == 1
        assert body["keys"]["reload_failures"] == 0
        assert body["shared_state"] is None

        call.answer(200, ANSWER)
        (await asyncio.wait_for(engine.calls.get(), timeout=30)).answer(200, ANSWER)
        await running.done()
        await waiting.done()


async def test_status_with_admission_off_counts_what_is_in_flight() -> None:
    engine = ScriptedEngine()
    async with in_process_gateway(engine, admin_port=ADMIN, admission="off") as gateway:
        running = gateway.request("/v1/completions", BODY)
        call = await asyncio.wait_for(engine.calls.get(), timeout=30)
        _, body = await _get(gateway, "/status", ADMIN)
        assert (body["admission"], body["queue"], body["keys"]) == ("off", None, None)
        (seen,) = body["engines"]
        assert seen["in_flight"] == 1
        assert "budget_tokens" not in seen
        call.answer(200, ANSWER)
        await running.done()
