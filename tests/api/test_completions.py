"""The OpenAI routes FastAPI serves (``app.api.completions``), in-process:
``/v1/models`` and one model of it, ``/v1/models/{model}``, the gateway's
own answer (vLLM 0.32 has no such route)."""

from tests.support.asgi import in_process_gateway
from tests.support.scripted_engine import MAX_MODEL_LEN, ScriptedEngine


async def test_one_model_is_its_entry_of_the_list_and_an_unknown_one_a_404() -> None:
    engine = ScriptedEngine(models=("tiny", "org/tiny-instruct"))
    async with in_process_gateway(engine) as gateway:
        listed = (await gateway.request("/v1/models", b"", method="GET").done()).json()
        for entry in listed["data"]:
            exchange = await gateway.request(f"/v1/models/{entry['id']}", b"", method="GET").done()
            assert exchange.status == 200
            assert exchange.json() == entry
        assert {e["id"] for e in listed["data"]} == {"tiny", "org/tiny-instruct"}
        assert listed["data"][0]["max_model_len"] == MAX_MODEL_LEN

        missing = await gateway.request("/v1/models/nope", b"", method="GET").done()
        assert missing.status == 404
        error = missing.json()["error"]
        assert error["code"] == "model_not_found"
        assert error["param"] == "model"
        assert engine.calls.empty()
