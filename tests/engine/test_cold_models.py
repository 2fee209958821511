"""Cold models (``app.engine.cold_models``): what a pool that scales to zero
serves while no engine is up — listed, validated, held or refused at once —
in-process, with nothing listening at the engine's address. Served through
a cold start by the real engine: tests/e2e/test_cold_start.py."""

import pytest

from app.engine.cold_models import parse_cold_models
from deploy.local import free_port
from tests.support.asgi import in_process_gateway

DOWN = f"http://127.0.0.1:{free_port()}"


def test_names_with_and_without_a_length_are_read() -> None:
    assert parse_cold_models(" tiny=2048 , big,") == {"tiny": 2048, "big": None}
    assert parse_cold_models(None) == parse_cold_models("") == {}


@pytest.mark.parametrize("text", ["tiny=", "=2048", "tiny=2k", "tiny=0", "tiny,tiny=8"])
def test_a_mistake_is_said_plainly(text: str) -> None:
    with pytest.raises(ValueError, match="cold model"):
        parse_cold_models(text)


async def test_a_cold_model_is_listed_and_checked_while_no_engine_is_up() -> None:
    async with in_process_gateway(upstream_url=DOWN, cold_models="tiny=64") as gateway:
        listed = await gateway.request("/v1/models", b"", method="GET").done()
        assert listed.status == 200
        assert listed.json()["data"] == [
            {"id": "tiny", "object": "model", "owned_by": "vllm", "max_model_len": 64}
        ]
        unknown = {"model": "other", "prompt": "hi", "max_tokens": 2}
        assert (await gateway.request("/v1/completions", unknown).done()).status == 503
        # Without a budget to hold it, a cold model is refused at once, as any.
        body = {"model": "tiny", "prompt": "hi", "max_tokens": 2}
        refused = await gateway.request("/v1/completions", body).done()
        assert refused.status == 503
        assert refused.json()["error"]["code"] == "engine_unavailable"


async def test_a_request_held_past_its_budget_is_refused_with_its_reason() -> None:
    async with in_process_gateway(
        upstream_url=DOWN, cold_models="tiny=64", cold_start_timeout=0.2
    ) as gateway:
        # Checked against the configured length before it is held.
        too_long = {"model": "tiny", "prompt": "hi", "max_tokens": 100}
        refused = await gateway.request("/v1/completions", too_long).done()
        assert refused.status == 400
        body = {"model": "tiny", "prompt": "hi", "max_tokens": 2}
        refused = await gateway.request("/v1/completions", body).done()
        assert refused.status == 503
        assert refused.json()["error"]["code"] == "cold_start_timeout"
        # No start seen yet: the fallback (GATEWAY_RETRY_AFTER_UNAVAILABLE).
        assert refused.headers["retry-after"] == "5"
        metrics = gateway.services.metrics
        assert metrics.rejections.labels("cold_start")._value.get() == 1
