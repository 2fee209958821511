"""Series per served model and adapter (``app.observe.model_metrics``), in-process:
counted by the name the request went to, never for a name nothing serves,
and gone with the adapter when no engine lists it any more."""

import asyncio

from tests.support.asgi import InProcessGateway, in_process_gateway
from tests.support.scripted_engine import MODEL, ScriptedEngine
from tests.support.wait import wait_for

ANSWER = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}


def model_series(gateway: InProcessGateway) -> set[str]:
    return {
        sample.labels["model"]
        for family in gateway.services.metrics.registry.collect()
        if family.name.startswith("gateway_model_")
        for sample in family.samples
    }


async def test_a_models_series_count_its_requests_and_go_with_it() -> None:
    engine = ScriptedEngine(adapters={"sql": MODEL})
    async with in_process_gateway(
        engine, model_aliases="latest=sql", health_interval=0.05, models_interval=0.1
    ) as gateway:
        exchange = gateway.request(
            "/v1/completions", {"model": "latest", "prompt": "hi", "max_tokens": 2}
        )
        call = await asyncio.wait_for(engine.calls.get(), timeout=30)
        call.answer(200, ANSWER)
        assert (await exchange.done()).status == 200
        assert gateway.metric("gateway_model_requests_total", model="sql", outcome="completed") == 1
        assert gateway.metric("gateway_model_tokens_total", model="sql", kind="completion") == 2
        refused = await gateway.request(
            "/v1/completions", {"model": "nothing-serves-this", "prompt": "hi"}
        ).done()
        assert refused.status == 404
        assert model_series(gateway) == {"sql"}

        engine.adapters = {}
        assert await wait_for(lambda: model_series(gateway) == set(), timeout=30)
