"""The Responses API through the gateway, against the real engine and with
the OpenAI SDK: a response whole and streamed (its stream ends with
``response.completed``, no ``[DONE]``), its prompt counted as the engine
counts it, a continued, retrieved and cancelled response on the engine that
holds it, and a client that leaves in every phase. (The session engine
keeps responses: ``VLLM_ENABLE_RESPONSES_API_STORE``, tests/conftest.py.)"""

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import AsyncOpenAI

from tests.support.disconnects import (
    WAITER_TOKENS,
    cancels,
    leave_before_the_first_token,
    ran_to_the_end,
    seconds_until_idle,
)
from tests.support.engines import MODEL, Engine
from tests.support.gateways import Gateway, StartGateway, access_line, running_gateway
from tests.support.keys import key_entry, write_keys_file
from tests.support.streams import open_stream
from tests.support.wait import wait_for, wait_until

LONG: dict[str, Any] = {"model": MODEL, "max_output_tokens": 1500, "ignore_eos": True}


@pytest.fixture(scope="module")
def keyed(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """Admission on, prompts counted by the engine, two tenants' keys."""
    keys = write_keys_file(
        tmp_path_factory.mktemp("keys") / "keys.yaml",
        [
            key_entry("acme-1", "acme", "key-acme", tokens_per_minute=100_000),
            key_entry("globex-1", "globex", "key-globex"),
        ],
    )
    log_dir = tmp_path_factory.mktemp("responses")
    with running_gateway(log_dir, engine.url, {"keys_file": keys}) as gateway:
        yield gateway


def client(gateway: Gateway, key: str = "key-acme") -> AsyncOpenAI:
    return AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0, timeout=120)


async def test_a_response_whole_its_prompt_counted_as_the_engine_counts_it(
    idle_engine: Engine, keyed: Gateway
) -> None:
    async with client(keyed) as api:
        raw = await api.responses.with_raw_response.create(
            model=MODEL,
            instructions="Answer briefly.",
            input=[{"role": "user", "content": [{"type": "input_text", "text": "你好 🌍 there"}]}],
            max_output_tokens=8,
            extra_body={"ignore_eos": True},
        )
    response = raw.parse()
    assert response.id.startswith("resp_")
    assert response.usage is not None
    assert response.usage.output_tokens == 8
    line = access_line(keyed, raw.headers["x-request-id"])
    assert (line["route"], line["outcome"], line["status"]) == ("responses", "completed", 200)
    # Its worst case: the prompt as the engine counted it, plus the bound.
    assert line["worst_tokens"] == response.usage.input_tokens + 8
    assert line["used_tokens"] == response.usage.input_tokens + 8


async def test_a_response_streamed_ends_with_response_completed(
    idle_engine: Engine, keyed: Gateway
) -> None:
    async with client(keyed) as api:
        stream = await api.responses.create(
            model=MODEL,
            input="Tell me a story",
            max_output_tokens=12,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        kinds = [event.type async for event in stream]
    assert kinds[0] == "response.created"
    assert "response.output_text.delta" in kinds
    assert kinds[-1] == "response.completed"

    body = {"model": MODEL, "input": "Once more", "max_output_tokens": 12, "ignore_eos": True}
    async with (
        httpx.AsyncClient(base_url=keyed.url, timeout=60) as http,
        open_stream(http, body, "/v1/responses", authorization="Bearer key-acme") as reply,
    ):
        raw = b"".join([part async for part in reply.aiter_raw()])
    assert b"data: [DONE]" not in raw
    last = raw.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
    assert last.startswith(b"event: response.completed\ndata: {")
    line = access_line(keyed, reply.headers["x-request-id"])
    assert (line["outcome"], line["completion_tokens"]) == ("completed", 12)
    assert line["ttft_s"] is not None


async def test_a_continued_response_carries_its_history_to_the_engine_that_holds_it(
    idle_engine: Engine, keyed: Gateway
) -> None:
    async with client(keyed) as api:
        first = await api.responses.create(
            model=MODEL,
            input="My name is Ada.",
            max_output_tokens=4,
            extra_body={"ignore_eos": True},
        )
        second = await api.responses.create(
            model=MODEL,
            input="What is my name?",
            max_output_tokens=4,
            previous_response_id=first.id,
        )
        assert first.usage is not None
        assert second.usage is not None
        # The engine rendered the earlier turn into the prompt.
        assert second.usage.input_tokens > first.usage.input_tokens + 4
        stored = await api.responses.retrieve(first.id)
        assert (stored.id, stored.status) == (first.id, first.status)
        with pytest.raises(openai.BadRequestError, match="synchronous"):
            await api.responses.cancel(first.id)
    # Another tenant's response is not found, neither read nor continued.
    async with client(keyed, "key-globex") as other:
        with pytest.raises(openai.NotFoundError):
            await other.responses.retrieve(first.id)
        with pytest.raises(openai.NotFoundError):
            await other.responses.create(
                model=MODEL, input="x", max_output_tokens=2, previous_response_id=first.id
            )


async def test_a_response_the_engine_does_not_hold_is_not_found(keyed: Gateway) -> None:
    async with client(keyed) as api:
        with pytest.raises(openai.NotFoundError):
            await api.responses.retrieve("resp_0123456789abcdef")


async def test_a_background_response_is_refused(keyed: Gateway) -> None:
    async with client(keyed) as api:
        with pytest.raises(openai.BadRequestError, match="background"):
            await api.responses.create(model=MODEL, input="x", background=True)


# --- a client that leaves, in each phase ------------------------------------------


async def read_deltas(response: httpx.Response, count: int) -> None:
    seen = 0
    async for raw in response.aiter_raw():
        seen += raw.count(b"event: response.output_text.delta\n")
        if seen >= count:
            return


async def test_a_client_that_leaves_mid_stream_stops_the_engine(
    idle_engine: Engine, gateway: Gateway
) -> None:
    ended = ran_to_the_end(idle_engine)
    before = cancels(gateway, "streaming")
    async with (
        httpx.AsyncClient(base_url=gateway.url, timeout=60) as http,
        open_stream(http, {**LONG, "input": "The river"}, "/v1/responses") as reply,
    ):
        assert reply.status_code == 200
        await read_deltas(reply, 5)
    seconds_until_idle(idle_engine, time.monotonic())
    assert ran_to_the_end(idle_engine) == ended, "the engine ran the response to its end"
    assert wait_until(lambda: cancels(gateway, "streaming") == before + 1, timeout=30)
    assert gateway.metric("gateway_requests_in_flight") == 0


async def test_a_client_that_leaves_a_whole_response_stops_the_engine(
    idle_engine: Engine, gateway: Gateway
) -> None:
    ended = ran_to_the_end(idle_engine)
    before = cancels(gateway, "non_streaming")

    def generating() -> bool:
        return (
            gateway.metric("gateway_requests_in_flight") == 1
            and idle_engine.metric("vllm:num_requests_running") == 1
        )

    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        call = asyncio.create_task(http.post("/v1/responses", json={**LONG, "input": "An orchard"}))
        assert await wait_for(generating, timeout=30)
        assert not call.done(), "the response finished before the client gave up"
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call
    seconds_until_idle(idle_engine, time.monotonic())
    assert ran_to_the_end(idle_engine) == ended, "the engine ran the response to its end"
    assert wait_until(lambda: cancels(gateway, "non_streaming") == before + 1, timeout=30)


async def test_a_client_that_leaves_before_the_first_token_stops_the_engine(
    idle_engine: Engine, gateway: Gateway
) -> None:
    """Every sequence of the engine is taken, so the response waits in the
    engine's own queue; its client leaves before its first token."""
    ended = ran_to_the_end(idle_engine, asked_at_most=WAITER_TOKENS)
    body = {**LONG, "max_output_tokens": WAITER_TOKENS, "input": "A museum"}
    await leave_before_the_first_token(idle_engine, gateway, "/v1/responses", body)
    assert ran_to_the_end(idle_engine, asked_at_most=WAITER_TOKENS) == ended, (
        "the engine ran the response to its end"
    )


async def test_a_client_that_leaves_while_queued_never_reaches_the_engine(
    idle_engine: Engine, start_gateway: StartGateway, tmp_path: Path
) -> None:
    """Admission lets one sequence run: the second response waits in the
    gateway's queue, and its client leaves there."""
    gateway = start_gateway(idle_engine.url, max_concurrency=1)
    gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)
    async with (
        httpx.AsyncClient(base_url=gateway.url, timeout=60) as http,
        open_stream(http, {**LONG, "input": "Holding"}, "/v1/responses") as holder,
    ):
        assert holder.status_code == 200
        assert wait_until(lambda: idle_engine.metric("vllm:num_requests_running") == 1, 30)
        # Its headers come only once it is admitted: sent aside, and left.
        body = {**LONG, "input": "Queued", "stream": True}
        headers = {"x-request-id": "the-queued-one"}
        queued = asyncio.create_task(http.post("/v1/responses", json=body, headers=headers))
        assert await wait_for(lambda: gateway.metric("gateway_queue_depth") == 1, timeout=30)
        queued.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await queued
        request_id = "the-queued-one"
        assert wait_until(lambda: cancels(gateway, "queued") == 1, timeout=30)
        assert gateway.metric("gateway_queue_depth") == 0
        # The engine ran the holder alone, and never saw the queued one.
        assert idle_engine.metric("vllm:num_requests_running") == 1
        assert idle_engine.metric("vllm:num_requests_waiting") == 0
        line = access_line(gateway, request_id)
        assert (line["outcome"], line["phase"], line["engine"]) == ("cancelled", "queued", None)
    seconds_until_idle(idle_engine, time.monotonic())
