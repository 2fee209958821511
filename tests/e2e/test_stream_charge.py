"""A stream charged to a key pays what the engine generated, also when its
client leaves early, and still gets the bytes the engine would send it
directly. Against the real engine: a client that asks for eight tokens a
chunk (vLLM's ``stream_interval``) and leaves after three chunks paid three
tokens when chunks were counted; it pays what the engine last reported. And
what the engine says the stream took reaches the gateway's log and metrics."""

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.engines import MODEL, Engine
from tests.support.gateways import Gateway, access_line, running_gateway
from tests.support.keys import key_entry, write_keys_file
from tests.support.streams import open_stream
from tests.support.wait import wait_until

CHUNK = 8
HEADERS = {"authorization": "Bearer key-metered"}


@pytest.fixture(scope="module")
def metered(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    keys: Path = write_keys_file(
        tmp_path_factory.mktemp("keys") / "keys.yaml",
        [key_entry("metered", "acme", "key-metered", tokens_per_minute=1_000_000)],
    )
    settings: dict[str, object] = {"keys_file": keys, "admission": "off"}
    with running_gateway(tmp_path_factory.mktemp("metered"), engine.url, settings) as gateway:
        yield gateway


async def test_a_stream_left_early_pays_the_tokens_the_engine_reported(
    idle_engine: Engine, metered: Gateway
) -> None:
    before = idle_engine.metric("vllm:generation_tokens_total")
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Go on and on"}],
        "max_tokens": 1000,
        "ignore_eos": True,
        "stream_interval": CHUNK,
    }
    chunks = 0
    async with (
        httpx.AsyncClient(base_url=metered.url, timeout=60) as http,
        open_stream(http, body, "/v1/chat/completions", **HEADERS) as reply,
    ):
        request_id = reply.headers["x-request-id"]
        async for raw in reply.aiter_raw():
            chunks += raw.count(b'"delta":{"content":"') - raw.count(b'"delta":{"content":""')
            if chunks >= 3:
                break
    line = access_line(metered, request_id)
    assert line["outcome"] == "cancelled"
    assert wait_until(lambda: idle_engine.metric("vllm:num_requests_running") == 0, timeout=30)
    generated = idle_engine.metric("vllm:generation_tokens_total") - before
    paid = line["used_tokens"] - line["prompt_tokens"]
    # At least the three chunks the client got (the first token alone, then
    # eight a chunk), at most what the engine generated before its abort.
    assert 1 + 2 * CHUNK <= paid <= generated
    assert line["completion_tokens"] == paid


def normalized(stream: bytes) -> bytes:
    """A stream without what differs between two calls: ids and times."""
    stream = re.sub(rb'"id":"chatcmpl-[0-9a-f]+"', b'"id":"chatcmpl-x"', stream)
    return re.sub(rb'"created":\d+', b'"created":0', stream)


def merged(stream: bytes) -> list[Any]:
    """A stream's events, ids and times aside, each run of content chunks
    merged into one: how many tokens vLLM puts in one chunk depends on how
    far its API server lags the engine, from one call to the next (a busy
    machine merged two of twenty in one run), so only what is said, in which
    events, is the engine's to repeat."""
    events: list[Any] = []
    for raw in normalized(stream).split(b"\n\n"):
        if not raw:
            continue
        event: Any = raw if raw == b"data: [DONE]" else json.loads(raw.removeprefix(b"data: "))
        if isinstance(event, dict) and "metrics" in event:
            # The engine's per-request timings (--enable-per-request-metrics)
            # differ between two calls; which ones it reports does not.
            event["metrics"] = sorted(event["metrics"])
        if _content_only(event) and events and _content_only(events[-1]):
            events[-1]["choices"][0]["delta"]["content"] += event["choices"][0]["delta"]["content"]
            continue
        events.append(event)
    return events


def _content_only(event: Any) -> bool:
    if not isinstance(event, dict) or len(event.get("choices") or ()) != 1:
        return False
    choice = event["choices"][0]
    return choice.get("finish_reason") is None and set(choice["delta"]) == {"content"}


async def test_a_charged_stream_is_the_one_the_engine_sends_directly(
    idle_engine: Engine, metered: Gateway
) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say something"}],
        "max_tokens": 20,
        "ignore_eos": True,
        "temperature": 0,
        "stream_options": {"include_usage": True},
    }
    streams = []
    for url, headers in ((idle_engine.url, {}), (metered.url, HEADERS)):
        async with (
            httpx.AsyncClient(base_url=url, timeout=60) as http,
            open_stream(http, body, "/v1/chat/completions", **headers) as reply,
        ):
            streams.append(b"".join([part async for part in reply.aiter_raw()]))
    direct, through = streams
    assert b'"usage"' in direct
    assert merged(through) == merged(direct)


async def test_what_the_engine_says_a_stream_took_is_read(
    idle_engine: Engine, metered: Gateway
) -> None:
    """The engine's own figures (its queue, its time to first token) come in
    its final usage chunk; the gateway logs them and what its side added."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Say something"}],
        "max_tokens": 4,
        "stream_options": {"include_usage": True},
    }
    before = metered.metric("gateway_added_latency_seconds_count", route="chat")
    async with (
        httpx.AsyncClient(base_url=metered.url, timeout=60) as http,
        open_stream(http, body, "/v1/chat/completions", **HEADERS) as reply,
    ):
        request_id = reply.headers["x-request-id"]
        assert "head;dur=" in reply.headers["server-timing"]
        await reply.aread()
    line = access_line(metered, request_id)
    assert line["outcome"] == "completed"
    assert line["engine_ttft_s"] > 0
    assert line["engine_queue_s"] >= 0
    assert line["added_s"] is not None
    assert metered.metric("gateway_added_latency_seconds_count", route="chat") == before + 1
