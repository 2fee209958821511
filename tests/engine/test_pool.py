"""The pool's one rule for where requests may go, read by admission on and
off alike: an engine up, or — when none is — any engine not ejected; and
its models, the union of its engines', each served by its own."""

import asyncio

import pytest

from tests.support.asgi import Exchange, in_process_gateway
from tests.support.scripted_engine import MODEL, EngineCall, ScriptedEngine, next_call
from tests.support.wait import wait_for

COMPLETIONS = "/v1/completions"
BODY = {"model": MODEL, "prompt": "hello", "max_tokens": 8}
ANSWER = {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}


async def _hangs() -> None:
    await asyncio.sleep(3600)


async def _calls(count: int, *fleet: ScriptedEngine) -> dict[ScriptedEngine, list[EngineCall]]:
    """The next ``count`` calls the fleet's engines receive, by engine."""
    got: dict[ScriptedEngine, list[EngineCall]] = {engine: [] for engine in fleet}
    for _ in range(count):
        engine, call = await next_call(*fleet)
        got[engine].append(call)
    return got


async def _split_of_four(
    admission: str, silent: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> tuple[int, int]:
    """Four requests held open together (so a least-loaded choice would
    split them) while the ``silent`` engines' checks stop finishing: how
    many reached a and b. Each is answered and succeeds."""
    engines = {"a": ScriptedEngine(), "b": ScriptedEngine()}
    a, b = engines["a"], engines["b"]
    # An engine is "heard from" for 3 check intervals and a check's timeout:
    # 3.15 s here, so a busy machine that delays the answering engine's checks
    # a while does not make it look silent too (with 0.2 s it did, once: both
    # silent, both routed to, two requests each).
    async with in_process_gateway(
        fleet=(a, b), admission=admission, health_interval=0.05, health_timeout=3
    ) as gateway:
        monitors = gateway.services.engines.monitors
        quiet = [monitors[engines[name].url] for name in silent]
        for monitor in quiet:
            monkeypatch.setattr(monitor, "check", _hangs)
        assert await wait_for(lambda: not any(m.up for m in quiet), timeout=30)
        assert not any(m.ejected for m in quiet)  # a doubt, not a death
        exchanges: list[Exchange] = [gateway.request(COMPLETIONS, BODY) for _ in range(4)]
        calls = await asyncio.wait_for(_calls(4, a, b), timeout=30)
        for call in calls[a] + calls[b]:
            call.answer(200, ANSWER)
        assert [(await e.done()).status for e in exchanges] == [200] * 4
        assert gateway.metric("gateway_engine_ejections_total") == 0
        return len(calls[a]), len(calls[b])


@pytest.mark.parametrize("admission", ["on", "off"])
async def test_an_engine_not_heard_from_gets_nothing_while_another_is_up(
    admission: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert await _split_of_four(admission, ("b",), monkeypatch) == (4, 0)


@pytest.mark.parametrize("admission", ["on", "off"])
async def test_with_no_engine_heard_from_every_engine_not_ejected_is_routed_to(
    admission: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert await _split_of_four(admission, ("a", "b"), monkeypatch) == (2, 2)


async def test_models_are_the_union_and_each_goes_to_its_engines() -> None:
    a = ScriptedEngine(models=(MODEL,))
    b = ScriptedEngine(models=("other",))
    async with in_process_gateway(fleet=(a, b)) as gateway:
        listed = await gateway.request("/v1/models", b"", method="GET").done()
        assert sorted(m["id"] for m in listed.json()["data"]) == sorted([MODEL, "other"])
        exchange = gateway.request(COMPLETIONS, {**BODY, "model": "other"})
        engine, call = await next_call(a, b)
        assert engine is b
        call.answer(200, ANSWER)
        await exchange.done()


async def test_adapters_are_listed_with_their_parent_and_follow_the_engine() -> None:
    """An adapter loaded into an engine while it runs shows within the
    model list's refresh, and one unloaded goes; each is listed with its
    parent, as the engine lists it."""
    engine = ScriptedEngine(adapters={"sql": MODEL})
    async with in_process_gateway(
        fleet=(engine,), health_interval=0.05, models_interval=0.1
    ) as gateway:

        async def listed() -> dict[str, dict[str, object]]:
            answer = await gateway.request("/v1/models", b"", method="GET").done()
            return {m["id"]: m for m in answer.json()["data"]}

        models = await listed()
        assert models["sql"]["parent"] == MODEL
        assert models["sql"]["root"] == "/adapters/sql"
        assert models[MODEL]["parent"] is None
        (monitor,) = gateway.services.engines.monitors.values()
        assert monitor.adapters == {"sql"}

        engine.adapters = {"sql": MODEL, "chat": MODEL}
        assert await wait_for(lambda: "chat" in monitor.models, timeout=30)
        assert (await listed())["chat"]["parent"] == MODEL
        engine.adapters = {"chat": MODEL}
        assert await wait_for(lambda: "sql" not in monitor.models, timeout=30)
        assert set(await listed()) == {MODEL, "chat"}
        assert monitor.adapters == {"chat"}
