"""The fields that are the gateway's, against real gateways and the real
engine.

Tenants are kept apart in the engine's prefix cache: what a request found
there is read from vLLM's own counters (``vllm:prefix_cache_queries_total``
and ``vllm:prefix_cache_hits_total``, in tokens), around one request at a
time on the otherwise idle session engine. vLLM caches whole blocks and
always computes a prompt's last token, so a prompt it holds entirely hits
all but less than one block of it; one it holds nothing of hits no block.
Each test's prompt starts with a fresh nonce, so nothing an earlier request
left in the cache can serve it.

The engine's own ``priority`` and ``request_id`` are stripped: sent with a
value the engine refuses, they would make it answer 400.
"""

import random
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from deploy.local import scrape, value
from tests.support.engines import MODEL, Engine
from tests.support.gateways import Gateway, StartGateway, running_gateway
from tests.support.keys import key_entry, write_keys_file
from tests.support.wait import wait_for

HITS = "vllm:prefix_cache_hits_total"
QUERIES = "vllm:prefix_cache_queries_total"
WORDS = ("alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "maple", "copper")
# About 1,000 tokens of the tiny model's: several blocks, well inside its
# context and the session engine's 24 blocks.
PROMPT_WORDS = 380


@pytest.fixture(scope="module")
def keys_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    shares = {"shared_prefix_cache": True}
    entries = [
        key_entry("a", "tenant-a", "key-a"),
        key_entry("b", "tenant-b", "key-b"),
        {**key_entry("a-fleet", "tenant-a", "key-a-fleet"), **shares},
        {**key_entry("b-fleet", "tenant-b", "key-b-fleet"), **shares},
    ]
    return write_keys_file(tmp_path_factory.mktemp("keys") / "keys.yaml", entries)


@pytest.fixture(scope="module")
def keyed(
    engine: Engine, keys_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    settings = {"keys_file": keys_path, "admission": "off"}
    with running_gateway(tmp_path_factory.mktemp("keyed"), engine.url, settings) as gateway:
        yield gateway


def long_prompt() -> str:
    nonce = uuid.uuid4().hex
    words = random.Random(nonce)
    return nonce + " " + " ".join(words.choice(WORDS) for _ in range(PROMPT_WORDS))


def block_size(engine: Engine) -> int:
    samples = scrape(engine.url)
    return int(next(s.labels["block_size"] for s in samples if s.name == "vllm:cache_config_info"))


def cache_counters(engine: Engine) -> tuple[float, float]:
    samples = scrape(engine.url)
    return value(samples, QUERIES), value(samples, HITS)


async def cached_tokens(engine: Engine, gateway: Gateway, key: str, prompt: str) -> tuple[int, int]:
    """Send ``prompt`` as ``key``'s; its prompt tokens, and how many of them
    the engine found in its prefix cache."""
    queries, hits = cache_counters(engine)
    body = {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "max_tokens": 1}
    async with httpx.AsyncClient(base_url=gateway.url, timeout=120) as http:
        reply = await http.post(
            "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}
        )
    assert reply.status_code == 200, reply.text
    prompt_tokens = int(reply.json()["usage"]["prompt_tokens"])
    # The counters move as the engine's stats are published: wait for this
    # request's query, then read what it hit.
    counted = await wait_for(lambda: cache_counters(engine)[0] >= queries + prompt_tokens, 60)
    assert counted, "the engine never counted the request's prefix-cache query"
    queries_after, hits_after = cache_counters(engine)
    assert queries_after == queries + prompt_tokens, "another request queried the cache meanwhile"
    return prompt_tokens, int(hits_after - hits)


async def test_a_tenant_finds_none_of_another_tenants_prompt_and_all_of_its_own(
    idle_engine: Engine, keyed: Gateway, keys_path: Path, start_gateway: StartGateway
) -> None:
    block = block_size(idle_engine)
    prompt = long_prompt()
    tokens, hits = await cached_tokens(idle_engine, keyed, "key-b", prompt)
    assert tokens >= 4 * block, "the prompt must span several blocks"
    assert hits < block
    # Tenant A, the same prompt, B's blocks in the cache: not one of them.
    _, hits = await cached_tokens(idle_engine, keyed, "key-a", prompt)
    assert hits < block
    # A again, through another replica: its own blocks, all of them (the
    # salt is the same on every gateway).
    replica = start_gateway(idle_engine.url, keys_file=keys_path, admission="off")
    replica.process.wait_http(f"{replica.url}/health/ready", timeout=60)
    _, hits = await cached_tokens(idle_engine, replica, "key-a", prompt)
    assert hits >= tokens - block


async def test_keys_that_share_the_cache_meet_there_and_no_isolated_key_does(
    idle_engine: Engine, keyed: Gateway
) -> None:
    block = block_size(idle_engine)
    prompt = long_prompt()
    tokens, hits = await cached_tokens(idle_engine, keyed, "key-b-fleet", prompt)
    assert hits < block
    # Another tenant's sharing key: B's blocks, all of them.
    _, hits = await cached_tokens(idle_engine, keyed, "key-a-fleet", prompt)
    assert hits >= tokens - block
    # The same tenant's isolated key: none of the shared ones.
    _, hits = await cached_tokens(idle_engine, keyed, "key-a", prompt)
    assert hits < block


@pytest.mark.parametrize(
    ("field", "value"), [("priority", 2**63), ("request_id", 5)], ids=["priority", "request_id"]
)
async def test_a_field_the_gateway_strips_never_reaches_the_engine(
    idle_engine: Engine, keyed: Gateway, field: str, value: object
) -> None:
    # A value the engine refuses (out of its int64 range, not a string), so
    # whether it reached the engine shows in the answer.
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 1,
        field: value,
    }
    async with httpx.AsyncClient(timeout=120) as http:
        direct = await http.post(f"{idle_engine.url}/v1/chat/completions", json=body)
        assert direct.status_code == 400, "the engine itself takes the field"
        served = await http.post(
            f"{keyed.url}/v1/chat/completions",
            json=body,
            headers={"authorization": "Bearer key-a"},
        )
    assert served.status_code == 200, served.text
