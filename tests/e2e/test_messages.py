"""Anthropic Messages through the gateway, against the real engine, with the
``anthropic`` SDK as the client: a message whole and streamed, its prompt
counted as the engine counts it, ``count_tokens``, the SDK's own errors
from Anthropic-shaped answers, a refusal the SDK retries after its
``Retry-After``, a key's token limit held on Messages streams, and a client
that leaves a stream in each phase.

vLLM's Messages route has no ``ignore_eos`` (it builds its chat request
from the Anthropic fields alone), and the test model ends a sequence at
random (``deploy/model/build_tiny_model.py``): a message's length is the
engine's. So these tests read lengths from the usage, and a client that
leaves mid-stream is tested where a message that ends on its own cannot be
taken for an abort (below)."""

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from anthropic import AsyncAnthropic
from anthropic.types import MessageParam

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

USER: list[MessageParam] = [{"role": "user", "content": "Tell me about the sea"}]
# Temperature 2 (vLLM's most) makes the test model's random end rarest:
# a few hundred tokens on average.
LONG: dict[str, Any] = {"model": MODEL, "max_tokens": 1500, "temperature": 2.0, "messages": USER}
# A completion that holds a gateway's slot for seconds.
HOLDING = {"model": MODEL, "prompt": "Hold", "max_tokens": 1500, "ignore_eos": True}
# What the key below may use in a minute: one message of 100 tokens and its
# prompt, not two.
KEY_TOKENS = 200


@pytest.fixture(scope="module")
def keyed(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """Admission on, prompts counted by the engine; one key without limits,
    one held to ``KEY_TOKENS`` a minute."""
    keys = write_keys_file(
        tmp_path_factory.mktemp("keys") / "keys.yaml",
        [
            key_entry("free-1", "free", "key-free"),
            key_entry("tight-1", "tight", "key-tight", tokens_per_minute=KEY_TOKENS),
        ],
    )
    log_dir = tmp_path_factory.mktemp("messages")
    with running_gateway(log_dir, engine.url, {"keys_file": keys}) as gateway:
        yield gateway


def client(gateway: Gateway, key: str = "key-free", retries: int = 0) -> AsyncAnthropic:
    return AsyncAnthropic(base_url=gateway.url, api_key=key, max_retries=retries, timeout=120)


async def test_a_message_whole_its_prompt_counted_as_the_engine_counts_it(
    idle_engine: Engine, keyed: Gateway
) -> None:
    async with client(keyed) as api:
        raw = await api.messages.with_raw_response.create(
            model=MODEL,
            system="Answer briefly.",
            messages=[{"role": "user", "content": [{"type": "text", "text": "你好 🌍 there"}]}],
            max_tokens=8,
        )
        message = await raw.parse()
        counted = await api.messages.count_tokens(
            model=MODEL,
            system="Answer briefly.",
            messages=[{"role": "user", "content": [{"type": "text", "text": "你好 🌍 there"}]}],
        )
    assert message.type == "message"
    assert 1 <= message.usage.output_tokens <= 8
    assert counted.input_tokens == message.usage.input_tokens
    line = access_line(keyed, raw.headers["x-request-id"])
    assert (line["route"], line["outcome"], line["status"]) == ("messages", "completed", 200)
    # Its worst case: the prompt as the engine counted it, plus the bound;
    # it pays what it used.
    assert line["worst_tokens"] == message.usage.input_tokens + 8
    assert line["used_tokens"] == message.usage.input_tokens + message.usage.output_tokens


async def test_a_message_streamed_ends_with_message_stop(
    idle_engine: Engine, keyed: Gateway
) -> None:
    async with (
        client(keyed) as api,
        api.messages.stream(model=MODEL, messages=USER, max_tokens=12) as stream,
    ):
        kinds = [event.type async for event in stream]
        final = await stream.get_final_message()
    assert kinds[0] == "message_start"
    assert "content_block_delta" in kinds
    assert kinds[-1] == "message_stop"
    line = access_line(keyed, stream.response.headers["x-request-id"])
    assert (line["route"], line["outcome"], line["completion_tokens"]) == (
        "messages",
        "completed",
        final.usage.output_tokens,
    )
    assert line["prompt_tokens"] == final.usage.input_tokens
    assert line["ttft_s"] is not None


async def test_errors_reach_the_sdk_as_anthropics(keyed: Gateway) -> None:
    async with client(keyed) as api:
        with pytest.raises(anthropic.NotFoundError) as missing:
            await api.messages.create(model="no-such-model", messages=USER, max_tokens=4)
        assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
        # The engine's own refusal of a sampling parameter, passed on.
        with pytest.raises(anthropic.BadRequestError, match="temperature"):
            await api.messages.create(
                model=MODEL, messages=USER, max_tokens=4, extra_body={"temperature": -3.0}
            )
    async with client(keyed, key="key-wrong") as wrong:
        with pytest.raises(anthropic.AuthenticationError):
            await wrong.messages.create(model=MODEL, messages=USER, max_tokens=4)
    async with httpx.AsyncClient(base_url=keyed.url, timeout=30) as http:
        reply = await http.post(
            "/v1/messages",
            json={"model": MODEL, "messages": USER},
            headers={"x-api-key": "key-free"},
        )
    assert reply.status_code == 400
    assert reply.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"},
    }


async def test_a_keys_token_limit_holds_on_messages_streams(
    idle_engine: Engine, keyed: Gateway
) -> None:
    """The stream is charged what its usage says; the next, whose worst case
    fits the minute alone but not after the first, is refused before the
    engine sees it."""
    async with (
        client(keyed, key="key-tight") as api,
        api.messages.stream(model=MODEL, messages=USER, max_tokens=100) as stream,
    ):
        final = await stream.get_final_message()
    prompt, output = final.usage.input_tokens, final.usage.output_tokens
    line = access_line(keyed, stream.response.headers["x-request-id"])
    assert line["used_tokens"] == prompt + output
    running = idle_engine.metric("vllm:request_params_max_tokens_count")
    async with client(keyed, key="key-tight") as api:
        with pytest.raises(anthropic.RateLimitError) as refused:
            await api.messages.create(
                model=MODEL, messages=USER, max_tokens=KEY_TOKENS - prompt - 1
            )
    assert refused.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    assert int(refused.value.response.headers["retry-after"]) >= 1
    assert idle_engine.metric("vllm:request_params_max_tokens_count") == running


async def test_a_refusal_is_retried_by_the_sdk_after_its_retry_after(
    idle_engine: Engine, start_gateway: StartGateway
) -> None:
    """One sequence admitted, held by a long completion: a message waits out
    its queue deadline and is refused; the holder leaves as soon as the
    refusal is counted, and the SDK, back after the ``Retry-After`` it was
    told (at least a second), is served."""
    gateway = start_gateway(idle_engine.url, max_concurrency=1, queue_timeout=0.5)
    gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)

    def refused() -> float:
        return gateway.metric("gateway_rejections_total", reason="objective_expired")

    async with (
        httpx.AsyncClient(base_url=gateway.url, timeout=60) as http,
        client(gateway, retries=3) as api,
    ):
        async with open_stream(http, HOLDING) as holder:
            assert holder.status_code == 200
            message = asyncio.ensure_future(
                api.messages.with_raw_response.create(model=MODEL, messages=USER, max_tokens=4)
            )
            assert await wait_for(lambda: refused() >= 1, timeout=30)
        raw = await message
    assert (await raw.parse()).usage.output_tokens >= 1
    assert raw.retries_taken == refused() >= 1


# --- a client that leaves, in each phase ------------------------------------------


# A message can end on its own before its client's leaving reaches the
# engine. Whether the engine aborted one is shown by the count of requests
# run to their end (an aborted one is never counted); a message that ended
# first shows nothing either way, so a phase takes up to ATTEMPTS messages to
# show one abort. Without the abort every message is counted (it runs to its
# random end or to max_tokens), and no attempt shows one.
ATTEMPTS = 6


async def an_abort_among_attempts(
    engine: Engine, leave_once: Callable[[int], Awaitable[bool]]
) -> bool:
    """Whether one of up to ``ATTEMPTS`` messages that ``leave_once`` left
    was aborted; ``leave_once`` says False when its message ended before its
    client left (no sample)."""
    for attempt in range(ATTEMPTS):
        seconds_until_idle(engine, time.monotonic())
        ended = ran_to_the_end(engine)
        if not await leave_once(attempt):
            continue
        seconds_until_idle(engine, time.monotonic())
        if ran_to_the_end(engine) == ended:
            return True
    return False


async def test_a_client_that_leaves_mid_stream_stops_the_engine(
    idle_engine: Engine, gateway: Gateway
) -> None:
    before = cancels(gateway, "streaming")

    async def leave_once(attempt: int) -> bool:
        body = {**LONG, "messages": [{"role": "user", "content": f"The river {attempt}"}]}
        async with (
            httpx.AsyncClient(base_url=gateway.url, timeout=60) as http,
            open_stream(http, body, "/v1/messages") as reply,
        ):
            assert reply.status_code == 200
            async for raw in reply.aiter_raw():
                if b"event: message_stop\n" in raw:
                    return False
                if b"event: content_block_delta\n" in raw:
                    return True
        return False

    assert await an_abort_among_attempts(idle_engine, leave_once), (
        "the engine ran every message its client left to its end"
    )
    assert wait_until(lambda: cancels(gateway, "streaming") > before, timeout=30)
    assert gateway.metric("gateway_requests_in_flight") == 0


async def test_a_client_that_leaves_a_whole_message_stops_the_engine(
    idle_engine: Engine, gateway: Gateway
) -> None:
    before = cancels(gateway, "non_streaming")

    def generating() -> bool:
        return (
            gateway.metric("gateway_requests_in_flight") == 1
            and idle_engine.metric("vllm:num_requests_running") == 1
        )

    async def leave_once(attempt: int) -> bool:
        body = {**LONG, "messages": [{"role": "user", "content": f"An orchard {attempt}"}]}
        async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
            call = asyncio.create_task(http.post("/v1/messages", json=body))
            started = await wait_for(lambda: generating() or call.done(), timeout=30)
            assert started
            if call.done():
                return False
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await call
        return True

    assert await an_abort_among_attempts(idle_engine, leave_once), (
        "the engine ran every message its client left to its end"
    )
    assert wait_until(lambda: cancels(gateway, "non_streaming") > before, timeout=30)


async def test_a_client_that_leaves_before_the_first_token_stops_the_engine(
    idle_engine: Engine, gateway: Gateway
) -> None:
    """Every sequence of the engine is taken, so the message waits in the
    engine's own queue; its client leaves before its first token."""
    ended = ran_to_the_end(idle_engine, asked_at_most=WAITER_TOKENS)
    body = {**LONG, "max_tokens": WAITER_TOKENS}
    await leave_before_the_first_token(idle_engine, gateway, "/v1/messages", body)
    assert ran_to_the_end(idle_engine, asked_at_most=WAITER_TOKENS) == ended, (
        "the engine ran the message to its end"
    )


async def test_a_client_that_leaves_while_queued_never_reaches_the_engine(
    idle_engine: Engine, start_gateway: StartGateway, tmp_path: Path
) -> None:
    gateway = start_gateway(idle_engine.url, max_concurrency=1)
    gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)
    # The slot is held by a completion of a fixed length (a message's is
    # the engine's).
    async with (
        httpx.AsyncClient(base_url=gateway.url, timeout=60) as http,
        open_stream(http, HOLDING) as holder,
    ):
        assert holder.status_code == 200
        assert wait_until(lambda: idle_engine.metric("vllm:num_requests_running") == 1, 30)
        headers = {"x-request-id": "the-queued-message"}
        body = {**LONG, "stream": True}
        queued = asyncio.create_task(http.post("/v1/messages", json=body, headers=headers))
        assert await wait_for(lambda: gateway.metric("gateway_queue_depth") == 1, timeout=30)
        queued.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await queued
        assert wait_until(lambda: cancels(gateway, "queued") == 1, timeout=30)
        assert idle_engine.metric("vllm:num_requests_running") == 1
        assert idle_engine.metric("vllm:num_requests_waiting") == 0
        line = access_line(gateway, "the-queued-message")
        assert (line["route"], line["outcome"], line["engine"]) == ("messages", "cancelled", None)
    seconds_until_idle(idle_engine, time.monotonic())
