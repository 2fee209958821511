"""What the fleet serves by name (``app.engine.catalog``), in-process: an
alias listed with the served name it goes to, a request for it sent on with
that name, and a fallback name taken while the first is not served."""

import asyncio

from tests.support.asgi import InProcessGateway, in_process_gateway
from tests.support.scripted_engine import MODEL, ScriptedEngine
from tests.support.wait import wait_for


async def sent_as(gateway: InProcessGateway, engine: ScriptedEngine, model: str) -> str:
    """The model a completion for ``model`` reached the engine with (answered)."""
    exchange = gateway.request("/v1/completions", {"model": model, "prompt": "hi", "max_tokens": 2})
    call = await asyncio.wait_for(engine.calls.get(), timeout=30)
    call.answer(200, {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    assert (await exchange.done()).status == 200
    return str(call.body["model"])


async def test_an_alias_is_listed_and_sent_on_as_the_served_name() -> None:
    engine = ScriptedEngine(models=(MODEL,), adapters={"sql-v1": MODEL})
    async with in_process_gateway(
        engine, model_aliases="sql=sql-v2|sql-v1", health_interval=0.05, models_interval=0.1
    ) as gateway:
        listed = await gateway.request("/v1/models", b"", method="GET").done()
        entries = {m["id"]: m for m in listed.json()["data"]}
        assert entries["sql"]["root"] == "sql-v1"
        assert entries["sql"]["parent"] == MODEL
        exchange = gateway.request(
            "/v1/completions", {"model": "sql", "prompt": "hi", "max_tokens": 2}
        )
        call = await asyncio.wait_for(engine.calls.get(), timeout=30)
        assert call.body["model"] == "sql-v1"
        call.answer(200, {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
        assert (await exchange.done()).status == 200

        # The new version served beside the old: the alias goes to it.
        engine.adapters = {"sql-v1": MODEL, "sql-v2": MODEL}
        monitor = next(iter(gateway.services.engines.monitors.values()))
        assert await wait_for(lambda: "sql-v2" in monitor.models, timeout=30)
        exchange = gateway.request(
            "/v1/completions", {"model": "sql", "prompt": "hi", "max_tokens": 2}
        )
        call = await asyncio.wait_for(engine.calls.get(), timeout=30)
        assert call.body["model"] == "sql-v2"
        call.answer(200, {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
        assert (await exchange.done()).status == 200


async def test_an_alias_none_of_whose_names_is_served_does_not_exist() -> None:
    async with in_process_gateway(model_aliases="chat=llama") as gateway:
        listed = await gateway.request("/v1/models", b"", method="GET").done()
        assert "chat" not in {m["id"] for m in listed.json()["data"]}
        refused = await gateway.request(
            "/v1/completions", {"model": "chat", "prompt": "hi", "max_tokens": 2}
        ).done()
        assert refused.status == 404
        assert "`chat`" in refused.json()["error"]["message"]
        assert gateway.engine.calls.empty()
