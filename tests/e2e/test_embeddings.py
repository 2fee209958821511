"""Embeddings and the other pooling routes (``/pooling``, score, rerank)
through the gateway, against a real embedding engine: the tiny model run by
vLLM's pooling runner (``ENGINE_RUNNER=pooling ENGINE_CONVERT=embed``) under
its own served name, with the OpenAI SDK where it has the call (embeddings),
plain HTTP otherwise. Score and rerank on an embedding model are vLLM's
cosine similarity (a bi-encoder).

A pooling engine looks to admission like any other: its ``/metrics`` has
``vllm:cache_config_info`` (blocks of 128 tokens), the KV usage and the
preemption counter, so its capacity is known and its budget adapts. An
embedding holds KV blocks for its input while it runs and generates
nothing: it reserves, and is charged, its input's tokens alone. This module
starts an engine of its own (a different runner from the session engine's),
with the session engine's small cache of 24 blocks."""

from collections.abc import Iterator

import httpx
import pytest
from openai import AsyncOpenAI, BadRequestError

from tests.support.disconnects import leave_while_queued_and_running
from tests.support.engines import ENGINE_KV_BLOCKS, Engine
from tests.support.gateways import Gateway, access_line
from tests.support.pooling import one_at_a_time, pooling_engine
from tests.support.wait import wait_until

EMBED_MODEL = "tiny-embed"
BLOCK = 128


@pytest.fixture(scope="module")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    with pooling_engine(tmp_path_factory, "embedder", EMBED_MODEL, "embed") as started:
        yield started


@pytest.fixture(scope="module")
def keyed(embedder: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with one_at_a_time(tmp_path_factory, embedder) as gateway:
        yield gateway


def client(gateway: Gateway) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="key-acme", max_retries=0, timeout=60)


def test_the_embedding_engine_shows_admission_its_kv_cache(
    embedder: Engine, keyed: Gateway
) -> None:
    assert embedder.metric("vllm:cache_config_info", num_gpu_blocks=str(ENGINE_KV_BLOCKS)) == 1
    assert wait_until(
        lambda: keyed.metric("gateway_kv_tokens_capacity") == ENGINE_KV_BLOCKS * BLOCK, timeout=30
    )


async def test_an_embedding_reserves_and_pays_its_input_alone(keyed: Gateway) -> None:
    async with client(keyed) as api:
        one = await api.embeddings.with_raw_response.create(
            model=EMBED_MODEL, input="An embedding of a sentence."
        )
        batch = await api.embeddings.with_raw_response.create(
            model=EMBED_MODEL, input=["first", "second 你好 🌍", "third"]
        )
    for raw, count in ((one, 1), (batch, 3)):
        answer = raw.parse()
        assert len(answer.data) == count
        assert all(len(item.embedding) > 0 for item in answer.data)
        line = access_line(keyed, raw.headers["x-request-id"])
        assert (line["route"], line["outcome"]) == ("embeddings", "completed")
        # Reserved: the input as the engine counts it, nothing generated.
        assert line["charged_tokens"] == line["used_tokens"] == answer.usage.prompt_tokens
        assert not line["completion_tokens"]


async def test_a_batch_larger_than_the_whole_cache_is_refused_up_front(keyed: Gateway) -> None:
    inputs = [[7] * 1000 for _ in range(4)]  # 4,000 tokens: the cache holds 3,072
    async with client(keyed) as api:
        with pytest.raises(BadRequestError, match="KV blocks"):
            await api.embeddings.create(model=EMBED_MODEL, input=inputs)


# The pooling routes other than embeddings: where, a body, and the route's name.
OTHERS = [
    ("/pooling", {"model": EMBED_MODEL, "input": ["first", "second 你好 🌍"]}, "pooling"),
    ("/score", {"model": EMBED_MODEL, "text_1": "a query", "text_2": ["one", "two"]}, "score"),
    ("/v1/score", {"model": EMBED_MODEL, "queries": ["q1", "q2"], "items": ["a", "b"]}, "score"),
    ("/rerank", {"model": EMBED_MODEL, "query": "a query", "documents": ["x", "y", "z"]}, "rerank"),
    ("/v2/rerank", {"model": EMBED_MODEL, "query": "q", "documents": ["x", "y"]}, "rerank"),
]


@pytest.mark.parametrize(("path", "body", "route"), OTHERS, ids=[path for path, _, _ in OTHERS])
async def test_a_pooling_route_is_answered_and_pays_its_input(
    keyed: Gateway, path: str, body: dict[str, object], route: str
) -> None:
    async with httpx.AsyncClient(base_url=keyed.url, timeout=60) as http:
        reply = await http.post(path, json=body, headers={"authorization": "Bearer key-acme"})
    assert reply.status_code == 200, reply.text
    answer = reply.json()
    assert answer.get("data") or answer.get("results")
    prompt = answer["usage"]["prompt_tokens"]
    assert prompt > 0
    line = access_line(keyed, reply.headers["x-request-id"])
    assert (line["route"], line["outcome"]) == (route, "completed")
    # Charged what the engine counted; held before it at least as much (a
    # pair is reserved as a cross-encoder reads it, the query with each).
    assert line["used_tokens"] == prompt
    assert line["charged_tokens"] >= prompt
    assert not line["completion_tokens"]


LEAVING = [
    ("/v1/embeddings", {"model": EMBED_MODEL, "input": "stalled"}),
    ("/pooling", {"model": EMBED_MODEL, "input": "stalled"}),
    ("/score", {"model": EMBED_MODEL, "text_1": "stalled", "text_2": "query"}),
    ("/rerank", {"model": EMBED_MODEL, "query": "stalled", "documents": ["one"]}),
]


@pytest.mark.parametrize(("path", "body"), LEAVING, ids=[path for path, _ in LEAVING])
async def test_a_client_that_leaves_while_queued_or_running_is_cancelled_there(
    embedder: Engine, keyed: Gateway, path: str, body: dict[str, object]
) -> None:
    await leave_while_queued_and_running(embedder, keyed, path, body, "key-acme")
