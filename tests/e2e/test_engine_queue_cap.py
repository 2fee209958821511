"""vLLM's own queue cap behind the gateway, on a real engine.

A second small engine for this module, started by the project's launcher
with ``--max-num-queued-reqs 1`` in ``ENGINE_EXTRA_ARGS`` (the session engine
must stay uncapped: other tests overflow it on purpose). The cap counts the
requests in flight, waiting or running, so one request fills it.

To hold that one request for as long as a test needs, without a race against
its generation, the engine runs with ``VLLM_SERVER_DEV_MODE=1``, which adds
``/pause`` and ``/resume``: paused with ``mode=keep``, the engine keeps the
requests it has, unscheduled. The refusal itself is the same code either way
(``AsyncLLM.check_admission``, before the response starts).

The gateway runs with admission off, so the engine's own queue is what
overflows, and with a ``GATEWAY_RETRY_AFTER_UNAVAILABLE`` that is not the
default, so the Retry-After the client gets can only be the gateway's setting.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from deploy.local import free_port
from tests.support.engines import MODEL, Engine, running_engine
from tests.support.fake_engine import FakeEngine
from tests.support.gateways import Gateway, running_gateway
from tests.support.wait import wait_for

QUEUE_CAP = 1
MAX_MODEL_LEN = 512
# 1,024 tokens: the smallest cache that starts at this model length (4 blocks
# did not: vLLM estimated it could hold 384 tokens of one request).
KV_BLOCKS = 8
RETRY_AFTER = 9

SHORT = {"model": MODEL, "prompt": "hello", "max_tokens": 8, "ignore_eos": True}
# Longer than the model's context: the engine refuses it as a 400 while
# rendering it, which comes after the queue check. So it never enters the
# queue, and it gets the queue cap's 503 exactly when the queue is full.
PROBE = {"model": MODEL, "prompt": [1] * (MAX_MODEL_LEN + 10), "max_tokens": 1}


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    env = {
        "ENGINE_MODEL_NAME": MODEL,
        "ENGINE_MAX_MODEL_LEN": str(MAX_MODEL_LEN),
        "ENGINE_KV_BLOCKS": str(KV_BLOCKS),
        "ENGINE_MAX_NUM_SEQS": "1",
        "ENGINE_EXTRA_ARGS": f"--max-num-queued-reqs {QUEUE_CAP}",
        "VLLM_SERVER_DEV_MODE": "1",
    }
    with running_engine("capped-engine", tmp_path_factory.mktemp("capped-engine"), env) as one:
        yield one


@pytest.fixture(scope="module")
def capped_gateway(capped: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    settings = {"admission": "off", "retry_after_unavailable": RETRY_AFTER}
    log_dir = tmp_path_factory.mktemp("capped-gateway")
    with running_gateway(log_dir, capped.url, settings) as gateway:
        yield gateway


def refusals(engine: Engine) -> float:
    return engine.metric("vllm:admission_rejections_total", reason="max_num_queued_reqs")


async def wait_until_full(http: httpx.AsyncClient) -> None:
    async def full() -> bool:
        probe = await http.post("/v1/completions", json=PROBE)
        assert probe.status_code in (400, 503), probe.text
        return probe.status_code == 503

    assert await wait_for(full, timeout=60), "the engine never refused a request for its full queue"


@contextlib.asynccontextmanager
async def queue_held(
    engine: Engine, gateway: Gateway
) -> AsyncIterator[asyncio.Future[httpx.Response]]:
    """The engine paused with one request from the gateway in its queue: the
    cap is full inside the block. After it the engine resumes and the held
    request is answered (the future's response)."""
    async with (
        httpx.AsyncClient(base_url=engine.url, timeout=60) as to_engine,
        httpx.AsyncClient(base_url=gateway.url, timeout=120) as to_gateway,
    ):
        (await to_engine.post("/pause", params={"mode": "keep"})).raise_for_status()
        held = asyncio.ensure_future(to_gateway.post("/v1/completions", json=SHORT))
        try:
            await wait_until_full(to_engine)
            yield held
        finally:
            (await to_engine.post("/resume")).raise_for_status()
            await asyncio.wait({held}, timeout=60)


@pytest.mark.parametrize("stream", [True, False])
async def test_a_full_engine_queue_is_a_503_with_the_gateways_retry_after(
    capped: Engine, capped_gateway: Gateway, stream: bool
) -> None:
    before = refusals(capped)
    body = {**SHORT, "stream": stream}
    async with (
        queue_held(capped, capped_gateway) as held,
        httpx.AsyncClient(timeout=60) as http,
    ):
        refused = await http.post(f"{capped_gateway.url}/v1/completions", json=body)
        engine_says = await http.post(f"{capped.url}/v1/completions", json=body)

    # The engine's own answer, with no Retry-After ...
    assert engine_says.status_code == 503
    assert "retry-after" not in engine_says.headers
    # ... reaches the client as it was written, with the gateway's Retry-After.
    assert refused.status_code == 503
    assert refused.headers["retry-after"] == str(RETRY_AFTER)
    assert refused.json() == engine_says.json()
    # All three refusals (the probe, the gateway's request, the direct one)
    # were the queue cap's.
    assert refusals(capped) - before == 3

    # The held request is served once the engine resumes, and with the queue
    # empty again the same request goes through.
    assert held.done()
    assert held.result().status_code == 200
    async with httpx.AsyncClient(base_url=capped_gateway.url, timeout=60) as http:
        assert (await http.post("/v1/completions", json=body)).status_code == 200


async def test_the_fake_busy_engine_answers_as_vllm_does(
    capped: Engine, capped_gateway: Gateway
) -> None:
    fake = FakeEngine(free_port())
    fake.start()
    try:
        async with queue_held(capped, capped_gateway), httpx.AsyncClient(timeout=60) as http:
            for stream in (True, False):
                real = await http.post(
                    f"{capped.url}/v1/completions", json={**SHORT, "stream": stream}
                )
                imitated = await http.post(
                    f"{fake.url}/v1/completions",
                    json={**SHORT, "model": "busy", "stream": stream},
                )
                assert imitated.status_code == real.status_code == 503
                assert imitated.headers["content-type"] == real.headers["content-type"]
                assert "retry-after" not in real.headers
                assert "retry-after" not in imitated.headers
                assert imitated.json() == real.json()
    finally:
        fake.stop()
