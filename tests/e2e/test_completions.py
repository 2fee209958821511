"""The OpenAI routes through the gateway, against the real engine, with the
official ``openai`` client."""

import json
import uuid
from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import httpx
import pytest
from openai import AsyncOpenAI
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletionMessageParam

from tests.support.engines import ADAPTERS, MODEL, Engine, engine_idle
from tests.support.gateways import Gateway, access_log
from tests.support.wait import wait_until

MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Tell me about the harbour town."}
]
# A fixed seed makes the engine write the same tokens for the same request.
FIXED = {"ignore_eos": True, "seed": 1234}


def seeded() -> dict[str, object]:
    """The same answer to the same request, whichever way it reaches the
    engine: sampled with a fixed seed, and with a prefix cache of its own (a
    new ``cache_salt``), so each prompt is computed from scratch the same way
    rather than once from scratch and once from cached blocks. Not greedy:
    the tiny model's likeliest token is always <|endoftext|>, which
    ``ignore_eos`` keeps generating and the text leaves out, so every greedy
    answer would be the empty string."""
    return {**FIXED, "cache_salt": uuid.uuid4().hex}


@dataclass
class Answer:
    """What the client got. The text is compared, not the chunks: the engine
    puts several tokens in one event when its server falls behind (vLLM
    merges the outputs not yet sent), so one request streamed twice comes in
    different chunks; a relay that dropped an event would change the text,
    one that ran two together would break the events the client parses."""

    text: str
    tokens: int  # completion tokens, per usage
    chunks: int  # chunks with content (1 when not streamed)


class Event(Protocol):
    @property
    def usage(self) -> CompletionUsage | None: ...


E = TypeVar("E", bound=Event)


async def collect(events: AsyncIterable[E], text_of: Callable[[E], str | None]) -> Answer:
    """A stream's text, its content chunks and its usage."""
    answer = Answer("", 0, 0)
    async for event in events:
        if event.usage is not None:
            answer.tokens = event.usage.completion_tokens
        text = text_of(event)
        if text:
            answer.text += text
            answer.chunks += 1
    return answer


def client(base_url: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0, timeout=120)


async def chat(base_url: str, stream: bool, max_tokens: int) -> Answer:
    async with client(base_url) as api:
        if not stream:
            reply = await api.chat.completions.create(
                model=MODEL, messages=MESSAGES, max_tokens=max_tokens, extra_body=seeded()
            )
            assert reply.usage is not None
            return Answer(reply.choices[0].message.content or "", reply.usage.completion_tokens, 1)
        events = await api.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=max_tokens,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=seeded(),
        )
        return await collect(events, lambda e: e.choices[0].delta.content if e.choices else None)


async def complete(base_url: str, stream: bool, max_tokens: int) -> Answer:
    prompt = "The lighthouse keeper"
    async with client(base_url) as api:
        if not stream:
            reply = await api.completions.create(
                model=MODEL, prompt=prompt, max_tokens=max_tokens, extra_body=seeded()
            )
            assert reply.usage is not None
            return Answer(reply.choices[0].text, reply.usage.completion_tokens, 1)
        events = await api.completions.create(
            model=MODEL,
            prompt=prompt,
            max_tokens=max_tokens,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=seeded(),
        )
        return await collect(events, lambda e: e.choices[0].text if e.choices else None)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("ask", [chat, complete], ids=["chat", "completions"])
async def test_each_route_gives_the_engines_text(
    idle_engine: Engine,
    gateway: Gateway,
    ask: Callable[[str, bool, int], Awaitable[Answer]],
    stream: bool,
) -> None:
    direct = await ask(idle_engine.url, stream, 40)
    # The next request runs alone: nothing of the last one is left.
    assert wait_until(lambda: engine_idle(idle_engine.metric), timeout=60), "engine still busy"
    through = await ask(gateway.url, stream, 40)
    assert direct.tokens == through.tokens == 40
    assert direct.text
    assert through.text == direct.text
    if stream:
        assert through.chunks > 1, "the stream came in one piece"


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
    (entry,) = [e for e in access_log(gateway) if e["request_id"] == "trace-42"]
    assert b'"id":"chatcmpl-trace-42"' not in response.content
    assert f'"id":"chatcmpl-{entry["engine_request_id"]}"'.encode() in response.content


async def test_models_come_from_the_engine(gateway: Gateway, idle_engine: Engine) -> None:
    """The engine's own list, entry for entry: its model and its LoRA
    adapters, each adapter with its parent."""
    async with client(gateway.url) as api:
        models = await api.models.list()
    async with client(idle_engine.url) as api:
        direct = await api.models.list()
    assert [model.id for model in models.data] == [model.id for model in direct.data]
    assert [model.id for model in models.data] == [MODEL, *ADAPTERS]
    parents = {model.id: (model.model_extra or {}).get("parent") for model in models.data}
    assert parents == {MODEL: None, **dict.fromkeys(ADAPTERS, MODEL)}


async def test_the_outcomes_are_counted(gateway: Gateway) -> None:
    completed = gateway.metric("gateway_requests_total", outcome="completed")
    await chat(gateway.url, True, 3)
    assert gateway.metric("gateway_requests_total", outcome="completed") == completed + 1
    assert gateway.metric("gateway_requests_in_flight") == 0
    assert gateway.metric("gateway_upstream_up") == 1


async def test_content_arrives_with_continuous_usage_stats(
    idle_engine: Engine, gateway: Gateway
) -> None:
    """With continuous usage stats the engine puts usage in every chunk: no
    content chunk may be taken for the usage chunk and dropped. The two
    answers are compared by their text, each request alone on the idle
    engine with its own prefix cache (chunk counts differ on a busy engine,
    which may send two tokens in one chunk)."""
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 16, "stream": True}
    both = {"include_usage": True, "continuous_usage_stats": True}
    only_continuous = {"continuous_usage_stats": True}
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        asked = await http.post(
            "/v1/completions", json={**body, **seeded(), "stream_options": both}
        )
        assert wait_until(lambda: engine_idle(idle_engine.metric), timeout=60), "engine still busy"
        plain = await http.post(
            "/v1/completions", json={**body, **seeded(), "stream_options": only_continuous}
        )

    def chunks(content: bytes) -> list[dict[str, Any]]:
        return [
            json.loads(event[6:])
            for event in content.split(b"\n\n")
            if event.startswith(b"data: {")
        ]

    def text(content: bytes) -> str:
        return "".join(c["choices"][0]["text"] for c in chunks(content) if c["choices"])

    with_text = [c for c in chunks(asked.content) if c["choices"]]
    assert all("usage" in c for c in with_text)
    assert with_text[-1]["usage"]["completion_tokens"] == 16
    assert text(asked.content)
    assert text(plain.content) == text(asked.content)
    assert not any(c.get("usage") for c in chunks(plain.content))
