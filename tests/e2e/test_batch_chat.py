"""Batch chat (``/v1/chat/completions/batch``) through the gateway, against
the real engine: its conversations answered one choice each, its demand and
its key's charge the sum over them (each counted as the engine counts it),
and a batch refused whole, before the engine sees it, when the sum can never
fit the engine's KV cache though each conversation would. (Its bodies'
400s are tests/bodies/test_bodies.py's.)"""

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.engines import ENGINE_KV_BLOCKS, MODEL, Engine
from tests.support.gateways import Gateway, access_line, running_gateway
from tests.support.keys import key_entry, write_keys_file

BATCH = "/v1/chat/completions/batch"
HEADERS = {"authorization": "Bearer key-batch"}


@pytest.fixture(scope="module")
def keyed(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """Admission on, prompts counted by the engine, a key with a token limit
    (so each request's worst case and its use are in its access-log line)."""
    keys = write_keys_file(
        tmp_path_factory.mktemp("keys") / "keys.yaml",
        [key_entry("batch-1", "batch", "key-batch", tokens_per_minute=1_000_000)],
    )
    log_dir = tmp_path_factory.mktemp("batch-chat")
    with running_gateway(log_dir, engine.url, {"keys_file": keys}) as gateway:
        yield gateway


def conversation(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def chat_tokens(engine: Engine, messages: list[dict[str, str]]) -> int:
    async with httpx.AsyncClient(base_url=engine.url, timeout=30) as http:
        reply = await http.post("/tokenize", json={"model": MODEL, "messages": messages})
    count: int = reply.json()["count"]
    return count


async def test_a_batch_is_one_choice_per_conversation_and_charged_their_sum(
    idle_engine: Engine, keyed: Gateway
) -> None:
    conversations = [conversation("hi"), conversation("The harbour at dawn was quiet.")]
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 6, "messages": conversations}
    async with httpx.AsyncClient(base_url=keyed.url, timeout=60) as http:
        reply = await http.post(BATCH, json=body, headers=HEADERS)
    assert reply.status_code == 200
    answer = reply.json()
    assert [choice["index"] for choice in answer["choices"]] == [0, 1]
    prompts = [await chat_tokens(idle_engine, c) for c in conversations]
    assert answer["usage"]["prompt_tokens"] == sum(prompts)
    line = access_line(keyed, reply.headers["x-request-id"])
    assert (line["route"], line["outcome"]) == ("batch_chat", "completed")
    # Its worst case: each conversation as the engine counts it, plus the bound.
    assert line["worst_tokens"] == sum(prompts) + 2 * 6
    assert line["used_tokens"] == answer["usage"]["total_tokens"]


async def test_a_batch_that_can_never_fit_is_refused_whole(
    idle_engine: Engine, keyed: Gateway
) -> None:
    long = conversation("The harbour at dawn was quiet. " * 80)
    prompt = await chat_tokens(idle_engine, long)
    capacity = ENGINE_KV_BLOCKS * 128
    count = capacity // prompt + 1
    # Each conversation fits the engine; together they cannot.
    assert prompt + 1 < capacity < count * prompt
    seen = idle_engine.metric("vllm:prompt_tokens_total")
    body = {"model": MODEL, "max_tokens": 4, "messages": [long] * count}
    async with httpx.AsyncClient(base_url=keyed.url, timeout=60) as http:
        reply = await http.post(BATCH, json=body, headers=HEADERS)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert "KV blocks" in error["message"]
    assert idle_engine.metric("vllm:prompt_tokens_total") == seen
