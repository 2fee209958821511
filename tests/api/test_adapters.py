"""Loading and unloading a LoRA adapter across the engines from the admin
port (``app.api.adapters``), against scripted engines answering as vLLM
0.32 does (its words for "already loaded" and "cannot be found" checked in
its source, ``vllm/entrypoints/openai/models/serving.py``): idempotent,
each engine's answer reported, the adapter routable at once."""

import asyncio
from typing import Any

from tests.support.asgi import InProcessGateway, in_process_gateway
from tests.support.scripted_engine import MODEL, ScriptedEngine

ADMIN, PUBLIC = 9100, 8000
ALREADY = {
    "error": {
        "message": "The lora adapter 'sql' has already been loaded. If you want to load the"
        " adapter in place, set 'load_inplace' to True.",
        "type": "InvalidUserInput",
        "code": 400,
    }
}
NOT_FOUND = {
    "error": {
        "message": "The lora adapter 'sql' cannot be found.",
        "type": "NotFoundError",
        "code": 404,
    }
}
# An engine without VLLM_ALLOW_RUNTIME_LORA_UPDATING: the route is not there.
NO_ROUTE = {"detail": "Not Found"}


async def admin(
    gateway: InProcessGateway,
    path: str,
    body: dict[str, Any],
    answers: dict[ScriptedEngine, tuple[int, dict[str, Any]]],
) -> tuple[int, dict[str, Any]]:
    """POST ``body`` to the admin port's ``path``; each engine in ``answers``
    receives the call and answers as given (and only those engines)."""
    exchange = gateway.request(path, body, port=ADMIN)
    for engine, (status, answer) in answers.items():
        call = await asyncio.wait_for(engine.calls.get(), timeout=30)
        assert call.path == {"/adapters/load": "/v1/load_lora_adapter"}.get(
            path, "/v1/unload_lora_adapter"
        )
        assert call.body["lora_name"] == "sql"
        if status == 200:
            engine.adapters = {"sql": MODEL} if path == "/adapters/load" else {}
        call.answer(status, answer)
    done = await asyncio.wait_for(exchange.done(), timeout=30)
    assert done.status is not None
    return done.status, done.json()


def results(report: dict[str, Any], *fleet: ScriptedEngine) -> list[str]:
    by_engine = {e["engine"]: e["result"] for e in report["engines"]}
    return [by_engine[e.label] for e in fleet]


async def test_loading_twice_and_unloading_twice_succeed_and_say_what_each_engine_did() -> None:
    a, b = ScriptedEngine(), ScriptedEngine()
    async with in_process_gateway(fleet=(a, b), admin_port=ADMIN) as gateway:
        load = {"name": "sql", "path": "/adapters/sql"}
        status, report = await admin(
            gateway, "/adapters/load", load, {a: (200, {}), b: (400, ALREADY)}
        )
        assert status == 200
        assert results(report, a, b) == ["loaded", "already_loaded"]
        assert report["adapter"] == "sql"
        assert a.calls.empty()
        assert b.calls.empty()
        # Routable at once: the engine's list was read again.
        monitor_a = gateway.services.engines.monitors[a.url]
        assert "sql" in monitor_a.adapters
        listed = await gateway.request("/v1/models", b"", method="GET", port=PUBLIC).done()
        assert {m["id"]: m.get("parent") for m in listed.json()["data"]}["sql"] == MODEL

        unload = {"name": "sql"}
        status, report = await admin(
            gateway, "/adapters/unload", unload, {a: (200, {}), b: (404, NOT_FOUND)}
        )
        assert status == 200
        assert results(report, a, b) == ["unloaded", "not_loaded"]
        assert "sql" not in monitor_a.models


async def test_an_engine_that_cannot_load_at_run_time_fails_the_call_and_is_named() -> None:
    a, b = ScriptedEngine(), ScriptedEngine()
    async with in_process_gateway(fleet=(a, b), admin_port=ADMIN) as gateway:
        load = {"name": "sql", "path": "/adapters/sql"}
        status, report = await admin(
            gateway, "/adapters/load", load, {a: (200, {}), b: (404, NO_ROUTE)}
        )
        assert status == 502
        assert results(report, a, b) == ["loaded", "failed"]
        failed = next(e for e in report["engines"] if e["result"] == "failed")
        assert failed["detail"] == "engine answered 404"


async def test_a_count_of_engines_and_the_admin_port_alone() -> None:
    a, b = ScriptedEngine(), ScriptedEngine()
    async with in_process_gateway(fleet=(a, b), admin_port=ADMIN) as gateway:
        # Slots alike (none reported): the lower URL.
        first = min((a, b), key=lambda e: e.url)
        load = {"name": "sql", "path": "/adapters/sql", "engines": 1}
        status, report = await admin(gateway, "/adapters/load", load, {first: (200, {})})
        assert status == 200
        assert [e["engine"] for e in report["engines"]] == [first.label]
        assert a.calls.empty()
        assert b.calls.empty()
        public = await gateway.request("/adapters/load", load, port=PUBLIC).done()
        assert public.status == 404
        for bad in (
            {"path": "/x"},
            {"name": "sql"},
            {**load, "engines": 0},
            {**load, "engines": True},
        ):
            refused = await gateway.request("/adapters/load", bad, port=ADMIN).done()
            assert refused.status == 400, bad
            assert refused.json()["error"]["type"] == "invalid_request_error"
        assert a.calls.empty()
        assert b.calls.empty()
