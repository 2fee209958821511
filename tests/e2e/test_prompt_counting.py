"""Prompts counted as the engine counts them, against the real engine: a
prompt denser in tokens than in characters is reserved and charged at its
real size, from either source (the engine's /tokenize, the model's
tokenizer files in the gateway), and a key's token limit holds under
concurrent dense streams."""

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import APIStatusError, AsyncOpenAI

from deploy.local import ROOT
from tests.support.engines import MODEL, Engine
from tests.support.gateways import Gateway, access_log, running_gateway
from tests.support.keys import key_entry, write_keys_file

# 57 characters: emoji and CJK, a few tokens each to the tiny model's
# byte-level tokenizer (and to most real ones).
DENSE = "🎉🚀✨🔥🌈 你好世界 こんにちは 안녕하세요 🧪🧬🔭🛰️ 漢字仮名交じり文 👩‍🔬👨‍🚀 ∮∇∂ 🥟🍜🍣"
LIMIT = 602
MAX_TOKENS = 8


@pytest.fixture(scope="module", params=["engine", "tokenizer"])
def counting(
    request: pytest.FixtureRequest, engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Gateway]]:
    """A keyed gateway counting prompts from one source, with one key far
    from any limit and one of ``LIMIT`` tokens a minute."""
    folder = tmp_path_factory.mktemp(f"counting-{request.param}")
    keys = write_keys_file(
        folder / "keys.yaml",
        [
            key_entry("open", "acme", "key-open"),
            key_entry("metered", "globex", "key-metered", tokens_per_minute=LIMIT),
        ],
    )
    settings: dict[str, object] = {"keys_file": keys, "prompt_tokens": request.param}
    if request.param == "tokenizer":
        settings["tokenizer_dir"] = ROOT / ".models" / "tiny"
    with running_gateway(folder, engine.url, settings) as gateway:
        yield request.param, gateway


def client(gateway: Gateway, key: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0, timeout=120)


def charged(gateway: Gateway, key_id: str) -> list[dict[str, Any]]:
    return [f for f in access_log(gateway) if f.get("key_id") == key_id and f["charged_tokens"]]


async def test_a_dense_prompt_is_reserved_and_charged_at_the_engines_count(
    counting: tuple[str, Gateway],
) -> None:
    source, gateway = counting
    async with client(gateway, "key-open") as api:
        chat = await api.chat.completions.create(
            model=MODEL,
            messages=[{"role": "system", "content": "Answer."}, {"role": "user", "content": DENSE}],
            max_tokens=MAX_TOKENS,
            extra_body={"ignore_eos": True},
        )
        completion = await api.completions.create(
            model=MODEL, prompt=DENSE, max_tokens=MAX_TOKENS, extra_body={"ignore_eos": True}
        )
    assert chat.usage is not None
    assert completion.usage is not None
    # Far more tokens than a length estimate gives (about a quarter of the characters).
    assert chat.usage.prompt_tokens > len(DENSE)
    assert completion.usage.prompt_tokens > len(DENSE)
    lines = charged(gateway, "open")
    assert [line["worst_tokens"] for line in lines[-2:]] == [
        chat.usage.prompt_tokens + MAX_TOKENS,
        completion.usage.prompt_tokens + MAX_TOKENS,
    ]
    assert gateway.metric("gateway_prompts_counted_total", source=source) >= 2
    assert gateway.metric("gateway_prompts_counted_total", source="estimate") == 0


async def test_a_keys_token_limit_holds_under_32_concurrent_dense_streams(
    counting: tuple[str, Gateway],
) -> None:
    """32 dense streams at once on a key of ``LIMIT`` tokens a minute: the
    key's requests use no more than its limit (counted by the engine)."""

    async def one(api: AsyncOpenAI) -> int:
        try:
            stream = await api.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": DENSE}],
                max_tokens=MAX_TOKENS,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"ignore_eos": True},
            )
        except APIStatusError as refused:
            if refused.status_code != 429:
                raise
            return 0
        used = 0
        async for chunk in stream:
            if chunk.usage is not None:
                used = chunk.usage.total_tokens
        return used

    _, gateway = counting
    async with client(gateway, "key-metered") as api:
        used = await asyncio.gather(*(one(api) for _ in range(32)))
    served = [u for u in used if u]
    print(f"\n{len(served)} of 32 served, {sum(used)} tokens used (limit {LIMIT} a minute)")
    assert served, "the limit admits at least one dense stream"
    assert len(served) < 32
    assert sum(used) <= LIMIT
    assert sum(line["used_tokens"] for line in charged(gateway, "metered")) == sum(used)


def test_the_tiny_models_files_are_where_the_tokenizer_source_reads_them() -> None:
    model = Path(ROOT / ".models" / "tiny")
    assert (model / "tokenizer.json").is_file()
    assert (model / "chat_template.jinja").is_file()
