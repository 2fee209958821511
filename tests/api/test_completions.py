"""The OpenAI routes through the gateway, against the real engine, with the
official ``openai`` client."""

import json

import httpx
import pytest
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam

from tests.conftest import MODEL, Engine, Gateway

MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Tell me about the harbour town."}
]
# A fixed seed makes the engine write the same tokens for the same request.
FIXED = {"ignore_eos": True, "seed": 1234}


def client(base_url: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=120)


async def chat_tokens(base_url: str, stream: bool, max_tokens: int) -> tuple[int, int]:
    """(tokens per usage, content chunks seen) for one chat completion."""
    async with client(base_url) as api:
        return await _chat_tokens(api, stream, max_tokens)


async def _chat_tokens(api: AsyncOpenAI, stream: bool, max_tokens: int) -> tuple[int, int]:
    if not stream:
        reply = await api.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=max_tokens,
            extra_body=FIXED,
        )
        assert reply.usage is not None
        return reply.usage.completion_tokens, 1
    chunks = 0
    usage = 0
    events = await api.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=FIXED,
    )
    async for event in events:
        if event.usage is not None:
            usage = event.usage.completion_tokens
        if event.choices and event.choices[0].delta.content:
            chunks += 1
    return usage, chunks


async def completion_tokens(base_url: str, stream: bool, max_tokens: int) -> int:
    async with client(base_url) as api:
        return await _completion_tokens(api, stream, max_tokens)


async def _completion_tokens(api: AsyncOpenAI, stream: bool, max_tokens: int) -> int:
    if not stream:
        reply = await api.completions.create(
            model=MODEL, prompt="The lighthouse keeper", max_tokens=max_tokens, extra_body=FIXED
        )
        assert reply.usage is not None
        return reply.usage.completion_tokens
    usage = 0
    events = await api.completions.create(
        model=MODEL,
        prompt="The lighthouse keeper",
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
        extra_body=FIXED,
    )
    async for event in events:
        if event.usage is not None:
            usage = event.usage.completion_tokens
    return usage


@pytest.mark.parametrize("stream", [False, True])
async def test_chat_gives_the_same_tokens_as_the_engine(
    idle_engine: Engine, gateway: Gateway, stream: bool
) -> None:
    direct = await chat_tokens(idle_engine.url, stream, 40)
    through = await chat_tokens(gateway.url, stream, 40)
    assert direct[0] == through[0] == 40
    # Streamed content arrives in as many chunks either way: the relay
    # neither merges nor drops events.
    assert through[1] == direct[1]


@pytest.mark.parametrize("stream", [False, True])
async def test_completions_give_the_same_tokens_as_the_engine(
    idle_engine: Engine, gateway: Gateway, stream: bool
) -> None:
    direct = await completion_tokens(idle_engine.url, stream, 40)
    through = await completion_tokens(gateway.url, stream, 40)
    assert direct == through == 40


async def test_streams_arrive_while_the_engine_is_still_generating(
    idle_engine: Engine, gateway: Gateway
) -> None:
    """With max_tokens=1000 the first token reaches the client while the engine
    has produced only a small part of the answer: nothing is buffered."""
    before = idle_engine.metric("vllm:generation_tokens_total")
    chunks = 0
    generated_at_first_chunk = None
    async with client(gateway.url) as api:
        events = await api.completions.create(
            model=MODEL, prompt="Bread needs time", max_tokens=1000, stream=True, extra_body=FIXED
        )
        async for event in events:
            if event.choices and event.choices[0].text:
                chunks += 1
                if generated_at_first_chunk is None:
                    generated_at_first_chunk = (
                        idle_engine.metric("vllm:generation_tokens_total") - before
                    )
    assert generated_at_first_chunk is not None
    assert generated_at_first_chunk < 500
    # Some tokens are partial UTF-8 and the engine sends them with the next one.
    assert chunks >= 500


async def test_usage_chunk_is_only_sent_to_clients_that_ask(gateway: Gateway) -> None:
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 5, "stream": True, **FIXED}
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        plain = (await http.post("/v1/completions", json=body)).content
        asked = (
            await http.post(
                "/v1/completions", json={**body, "stream_options": {"include_usage": True}}
            )
        ).content
    assert b'"usage"' not in plain
    assert b'"usage":{' in asked
    assert plain.endswith(b"data: [DONE]\n\n")
    assert asked.endswith(b"data: [DONE]\n\n")


async def test_stream_headers_and_request_id_round_trip(gateway: Gateway) -> None:
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 3, "stream": True, **FIXED}
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        response = await http.post(
            "/v1/chat/completions", json=body, headers={"X-Request-Id": "trace-42"}
        )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-cache"
    assert response.headers["x-accel-buffering"] == "no"
    assert response.headers["x-request-id"] == "trace-42"
    # The engine got an id the gateway made (it names its completion after
    # it), logged beside the client's.
    (entry,) = [
        json.loads(line)
        for line in gateway.process.log_text().splitlines()
        if line.startswith('{"ts"') and '"request_id":"trace-42"' in line
    ]
    assert b'"id":"chatcmpl-trace-42"' not in response.content
    assert f'"id":"chatcmpl-{entry["engine_request_id"]}"'.encode() in response.content


async def test_models_come_from_the_engine(gateway: Gateway) -> None:
    async with client(gateway.url) as api:
        models = await api.models.list()
    assert [model.id for model in models.data] == [MODEL]


async def test_the_outcomes_are_counted(gateway: Gateway) -> None:
    completed = gateway.metric("gateway_requests_total", outcome="completed")
    await chat_tokens(gateway.url, True, 3)
    assert gateway.metric("gateway_requests_total", outcome="completed") == completed + 1
    assert gateway.metric("gateway_requests_in_flight") == 0
    assert gateway.metric("gateway_upstream_up") == 1


async def test_content_arrives_with_continuous_usage_stats(gateway: Gateway) -> None:
    """With continuous usage stats the engine puts usage in every chunk: no
    content chunk may be taken for the usage chunk and dropped."""
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 6, "stream": True, **FIXED}
    both = {"include_usage": True, "continuous_usage_stats": True}
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        asked = (await http.post("/v1/completions", json={**body, "stream_options": both})).content
        only_continuous = {"continuous_usage_stats": True}
        plain = (
            await http.post("/v1/completions", json={**body, "stream_options": only_continuous})
        ).content

    def chunks(content: bytes) -> list[dict[str, object]]:
        return [
            json.loads(event[6:])
            for event in content.split(b"\n\n")
            if event.startswith(b"data: {")
        ]

    with_text = [c for c in chunks(asked) if c["choices"]]
    assert len(with_text) >= 6
    assert all("usage" in c for c in with_text)
    assert sum(1 for c in chunks(plain) if c["choices"]) == len(with_text)
    assert not any(c.get("usage") for c in chunks(plain))
