"""LoRA adapters through the gateway on the fleet's two real engines, each
serving the adapters ``sql`` and ``poem`` with one LoRA slot: listed with
their parent and served; one loaded and unloaded at run time through the
gateway's admin port; and a mixed stream of requests kept one adapter to
an engine, as the engines' own metrics show (``vllm:lora_requests_info``:
the adapters their requests used, each label set stamped with the time it
was last current)."""

import asyncio
import subprocess
import time
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import httpx
import openai
import pytest
from openai import AsyncOpenAI, AsyncStream
from openai.types import Completion

from deploy.local import free_port, scrape
from tests.support.engines import ADAPTERS, MODEL, Engine, engine_idle
from tests.support.gateways import Gateway, StartGateway
from tests.support.keys import key_entry, write_keys_file
from tests.support.wait import wait_for


def fleet_gateway(start_gateway: StartGateway, fleet: list[Engine]) -> Gateway:
    """A gateway as it runs by default (least loaded, weighing the adapter)."""
    gateway = start_gateway(fleet[0].url, upstream_urls=",".join(e.url for e in fleet))
    gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)
    return gateway


async def test_a_tenants_adapter_is_refused_and_unlisted_to_another_tenant(
    idle_engine: Engine, start_gateway: StartGateway, tmp_path: Path
) -> None:
    """Each tenant's key names its adapter: to the other, it does not exist —
    not listed, a 404 through the SDK — and the engine never sees the call."""
    keys = write_keys_file(
        tmp_path / "keys.yaml",
        [
            key_entry("acme-1", "acme", "key-acme", models=(MODEL, "sql")),
            key_entry("globex-1", "globex", "key-globex", models=(MODEL, "poem")),
        ],
    )
    gateway = start_gateway(idle_engine.url, keys_file=keys)
    gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)
    before = idle_engine.metric("vllm:request_success_total")
    async with AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="key-acme", max_retries=0) as acme:
        assert {m.id for m in (await acme.models.list()).data} == {MODEL, "sql"}
        reply = await acme.completions.create(model="sql", prompt="SELECT", max_tokens=4)
        assert reply.model == "sql"
        with pytest.raises(openai.NotFoundError) as refused:
            await acme.completions.create(model="poem", prompt="Roses", max_tokens=4)
        assert "poem" in str(refused.value)
    async with AsyncOpenAI(
        base_url=f"{gateway.url}/v1", api_key="key-globex", max_retries=0
    ) as globex:
        assert {m.id for m in (await globex.models.list()).data} == {MODEL, "poem"}
    # One request reached the engine: acme's own.
    assert await wait_for(
        lambda: idle_engine.metric("vllm:request_success_total") == before + 1, timeout=60
    )


def adapters_used_since(engine: Engine, since: float) -> set[str]:
    """The adapters the engine reported running or waiting since ``since``
    (wall-clock seconds): the label sets last current after it."""
    used: set[str] = set()
    for sample in scrape(engine.url):
        if sample.name == "vllm:lora_requests_info" and sample.value > since:
            for label in ("running_lora_adapters", "waiting_lora_adapters"):
                used |= {name for name in sample.labels.get(label, "").split(",") if name}
    return used


async def test_adapters_are_listed_with_their_parent_and_served(
    idle_engine: Engine, second: Engine, start_gateway: StartGateway
) -> None:
    gateway = fleet_gateway(start_gateway, [idle_engine, second])
    async with AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0) as client:
        listed = {m.id: m for m in (await client.models.list()).data}
        assert set(listed) == {MODEL, *ADAPTERS}
        for name in ADAPTERS:
            assert (listed[name].model_extra or {})["parent"] == MODEL
            reply = await client.completions.create(
                model=name, prompt="SELECT", max_tokens=8, extra_body={"ignore_eos": True}
            )
            assert reply.model == name
            assert reply.usage is not None
            assert reply.usage.completion_tokens == 8
    assert gateway.metric("gateway_requests_total", outcome="completed") == len(ADAPTERS)


async def test_each_adapter_stays_on_one_engine(
    idle_engine: Engine, second: Engine, start_gateway: StartGateway
) -> None:
    """Two requests for ``sql``, then two for ``poem``, each sent once the
    one before is in flight: by load alone the second ``sql`` would go to the
    other engine, and each engine would run both adapters in turns."""
    fleet = [idle_engine, second]
    assert await wait_for(lambda: all(engine_idle(e.metric) for e in fleet), timeout=60)
    gateway = fleet_gateway(start_gateway, fleet)
    since = time.time()
    async with AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0) as client:
        streams: list[AsyncStream[Completion]] = []
        for i, name in enumerate(["sql", "sql", "poem", "poem"]):
            streams.append(
                await client.completions.create(
                    model=name,
                    prompt=f"Request {i}",
                    # Long enough to outlast the next sends (5 blocks each of
                    # the engine's 24, two per engine).
                    max_tokens=512,
                    extra_body={"ignore_eos": True},
                    stream=True,
                    stream_options={"include_usage": True},
                )
            )
            assert await wait_for(partial(in_flight, gateway, i + 1), timeout=60)
        counts = await asyncio.gather(*(_tokens(s) for s in streams))
    assert counts == [512] * 4
    assert await wait_for(lambda: all(engine_idle(e.metric) for e in fleet), timeout=60)
    used = sorted((adapters_used_since(e, since) for e in fleet), key=sorted)
    assert used == [{"poem"}, {"sql"}]
    routed = [
        gateway.metric("gateway_engine_requests_total", engine=e.url.removeprefix("http://"))
        for e in fleet
    ]
    assert sorted(routed) == [2, 2]


def in_flight(gateway: Gateway, count: int) -> bool:
    return gateway.metric("gateway_requests_in_flight") == count


async def _tokens(stream: AsyncIterator[Completion]) -> int:
    """The tokens the stream's usage chunk says it carried (a chunk may carry
    several: vLLM merges them when its reader is behind)."""
    used = 0
    async for chunk in stream:
        if chunk.usage is not None:
            used = chunk.usage.completion_tokens
    return used


@pytest.fixture
def haiku(tmp_path: Path) -> Path:
    """A third adapter's directory, written now by the project's builder."""
    builder = [".venv-engine/bin/python", "deploy/model/build_tiny_adapters.py"]
    names = ["--base", ".models/tiny", "--out", str(tmp_path), "--names", "haiku"]
    subprocess.run([*builder, *names], check=True, timeout=300)
    return tmp_path / "haiku"


async def test_an_adapter_loaded_at_run_time_from_the_admin_port_is_served(
    idle_engine: Engine, second: Engine, start_gateway: StartGateway, haiku: Path
) -> None:
    """A third adapter, written now, loaded on both engines through the
    gateway's admin port, served at once; loading it again is no error;
    unloaded, it is gone from the list and refused as unknown."""
    fleet = [idle_engine, second]
    admin_port = free_port()
    gateway = start_gateway(
        fleet[0].url, upstream_urls=",".join(e.url for e in fleet), admin_port=admin_port
    )
    gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)
    admin = f"http://127.0.0.1:{admin_port}"
    load = {"name": "haiku", "path": str(haiku)}
    async with (
        httpx.AsyncClient(base_url=admin, timeout=120) as http,
        AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0) as client,
    ):
        try:
            for expected in ("loaded", "already_loaded"):
                reply = await http.post("/adapters/load", json=load)
                assert reply.status_code == 200, reply.text
                assert [e["result"] for e in reply.json()["engines"]] == [expected] * 2
            listed = {m.id: m for m in (await client.models.list()).data}
            assert (listed["haiku"].model_extra or {})["parent"] == MODEL
            answer = await client.completions.create(model="haiku", prompt="Autumn", max_tokens=4)
            assert answer.model == "haiku"
        finally:
            reply = await http.post("/adapters/unload", json={"name": "haiku"})
        assert reply.status_code == 200, reply.text
        assert [e["result"] for e in reply.json()["engines"]] == ["unloaded"] * 2
        assert "haiku" not in {m.id for m in (await client.models.list()).data}
        with pytest.raises(openai.NotFoundError):
            await client.completions.create(model="haiku", prompt="Autumn", max_tokens=4)
