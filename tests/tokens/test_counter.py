"""Counting prompts before admission, in-process against a scripted engine
(a fake upstream: the test answers each /tokenize call as vLLM does, or
fails it the ways an engine can)."""

from pathlib import Path
from typing import Any

import pytest

from app.settings import Settings
from app.tokens.counter import counting_note
from tests.support.asgi import InProcessGateway, in_process_gateway
from tests.support.scripted_engine import DONE, MODEL, EngineCall, ScriptedEngine, chunk
from tests.support.wait import wait_for
from tests.tokens.test_local import counted_reads, write_model

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MESSAGES = [{"role": "user", "content": "hello 你 好"}]


def exact_engine() -> ScriptedEngine:
    """Blocks of one token: what is reserved is the demand, token for token."""
    return ScriptedEngine(kv_blocks=100_000, block_size=1)


def tokenized(count: int) -> dict[str, Any]:
    """vLLM's answer to /tokenize."""
    return {"count": count, "max_model_len": 2048, "tokens": list(range(count))}


def reserved(gateway: InProcessGateway) -> float:
    return gateway.metric("gateway_kv_tokens_reserved")


def counted(gateway: InProcessGateway, source: str) -> float:
    return gateway.metric("gateway_prompts_counted_total", source=source)


async def streaming(gateway: InProcessGateway, call: EngineCall) -> None:
    """Answer the completion call with a stream that stays open."""
    assert call.path in (CHAT, COMPLETIONS)
    call.stream()
    call.send(chunk("a"))


async def test_a_chat_is_counted_by_the_engines_tokenize_and_reserved_exactly() -> None:
    async with in_process_gateway(exact_engine(), prompt_tokens="engine") as gateway:
        body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 16, "stream": True}
        exchange = gateway.request(CHAT, {**body, "chat_template_kwargs": {"x": 1}})
        tokenize = await gateway.engine.calls.get()
        assert tokenize.path == "/tokenize"
        assert tokenize.body == {
            "model": MODEL,
            "messages": MESSAGES,
            "chat_template_kwargs": {"x": 1},
        }
        tokenize.answer(200, tokenized(40))
        completion = await gateway.engine.calls.get()
        await streaming(gateway, completion)
        await exchange.wait_for(lambda e: b"data:" in e.body)
        assert reserved(gateway) == 40 + 16
        assert counted(gateway, "engine") == 1
        completion.send(DONE)
        completion.end()
        await exchange.done()
        assert gateway.settled()


async def test_a_completion_batch_is_counted_prompt_by_prompt_with_the_bos() -> None:
    async with in_process_gateway(exact_engine(), prompt_tokens="engine") as gateway:
        exchange = gateway.request(
            COMPLETIONS, {"model": MODEL, "prompt": ["one", "two"], "max_tokens": 4, "stream": True}
        )
        for text, count in (("one", 3), ("two", 5)):
            call = await gateway.engine.calls.get()
            assert call.path == "/tokenize"
            assert call.body == {"model": MODEL, "prompt": text, "add_special_tokens": True}
            call.answer(200, tokenized(count))
        completion = await gateway.engine.calls.get()
        await streaming(gateway, completion)
        await exchange.wait_for(lambda e: b"data:" in e.body)
        assert reserved(gateway) == (3 + 4) + (5 + 4)
        completion.send(DONE)
        completion.end()
        await exchange.done()


async def test_prompts_given_as_token_ids_are_not_counted_again() -> None:
    async with in_process_gateway(exact_engine(), prompt_tokens="engine") as gateway:
        exchange = gateway.request(
            COMPLETIONS, {"model": MODEL, "prompt": [5, 6, 7], "max_tokens": 4, "stream": True}
        )
        completion = await gateway.engine.calls.get()
        await streaming(gateway, completion)
        await exchange.wait_for(lambda e: b"data:" in e.body)
        assert reserved(gateway) == 3 + 4
        assert gateway.engine.requests["/tokenize"] == 0
        completion.send(DONE)
        completion.end()
        await exchange.done()


async def estimated_after(gateway: InProcessGateway, fail: Any) -> None:
    """A chat whose /tokenize call ``fail`` answers still runs, estimated."""
    exchange = gateway.request(CHAT, {"model": MODEL, "messages": MESSAGES, "max_tokens": 8})
    call = await gateway.engine.calls.get()
    assert call.path == "/tokenize"
    while call.path == "/tokenize":
        # A connection dropped before any answer is sent once more (the
        # engine client's rule): failed again.
        fail(call)
        call = await gateway.engine.calls.get()
    completion = call
    assert completion.path == CHAT
    completion.answer(200, {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 8}})
    await exchange.done()
    assert exchange.status == 200
    assert counted(gateway, "estimate") == 1
    assert counted(gateway, "engine") == 0


async def test_an_engine_that_fails_to_count_leaves_the_prompt_to_the_estimate() -> None:
    def server_error(call: EngineCall) -> None:
        call.answer(500, {"error": {"message": "boom", "type": "InternalServerError"}})

    def no_such_route(call: EngineCall) -> None:
        call.answer(404, {"detail": "Not Found"})

    def gone(call: EngineCall) -> None:
        call.drop()

    for fail in (server_error, no_such_route, gone):
        async with in_process_gateway(exact_engine(), prompt_tokens="engine") as gateway:
            await estimated_after(gateway, fail)


async def test_an_engine_slower_than_the_count_timeout_leaves_the_prompt_to_the_estimate() -> None:
    settings: dict[str, Any] = {"prompt_tokens": "engine", "prompt_count_timeout": 0.2}
    async with in_process_gateway(exact_engine(), **settings) as gateway:
        await estimated_after(gateway, lambda call: None)


async def test_the_engines_refusal_to_count_is_the_requests_answer() -> None:
    async with in_process_gateway(exact_engine(), prompt_tokens="engine") as gateway:
        exchange = gateway.request(CHAT, {"model": MODEL, "messages": MESSAGES, "max_tokens": 8})
        tokenize = await gateway.engine.calls.get()
        refusal = {"error": {"message": "bad role", "type": "BadRequestError", "code": 400}}
        tokenize.answer(400, refusal)
        await exchange.done()
        assert exchange.status == 400
        assert exchange.json()["error"]["message"] == "bad role"
        assert gateway.metric("gateway_rejections_total", reason="engine_invalid") == 1
        assert gateway.engine.calls.empty()
        assert gateway.settled()


async def test_the_gateways_tokenizer_counts_without_asking_the_engine(tmp_path: Path) -> None:
    model = write_model(tmp_path / "tiny")
    settings: dict[str, Any] = {"prompt_tokens": "tokenizer", "tokenizer_dir": model}
    async with in_process_gateway(exact_engine(), **settings) as gateway:
        body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 16, "stream": True}
        exchange = gateway.request(CHAT, body)
        completion = await gateway.engine.calls.get()
        await streaming(gateway, completion)
        await exchange.wait_for(lambda e: b"data:" in e.body)
        # <|user|> hello 你 好 <|end|> <|assistant|>
        assert reserved(gateway) == 6 + 16
        assert counted(gateway, "tokenizer") == 1
        assert gateway.engine.requests["/tokenize"] == 0
        completion.send(DONE)
        completion.end()
        await exchange.done()


async def test_what_the_gateways_tokenizer_cannot_render_is_counted_by_the_engine(
    tmp_path: Path,
) -> None:
    settings: dict[str, Any] = {
        "prompt_tokens": "tokenizer",
        "tokenizer_dir": write_model(tmp_path / "tiny"),
    }
    async with in_process_gateway(exact_engine(), **settings) as gateway:
        tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
        body = {"model": MODEL, "messages": MESSAGES, "tools": tools, "max_tokens": 16}
        exchange = gateway.request(CHAT, body)
        tokenize = await gateway.engine.calls.get()
        assert tokenize.path == "/tokenize"
        assert tokenize.body["tools"] == tools
        tokenize.answer(200, tokenized(30))
        completion = await gateway.engine.calls.get()
        completion.answer(
            200, {"choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 1}}
        )
        await exchange.done()
        assert counted(gateway, "engine") == 1
        assert counted(gateway, "tokenizer") == 0


async def test_a_template_that_refuses_the_chat_is_a_400_that_never_reaches_the_engine(
    tmp_path: Path,
) -> None:
    model = write_model(tmp_path / "tiny", template="{{ raise_exception('no user role here') }}")
    settings: dict[str, Any] = {"prompt_tokens": "tokenizer", "tokenizer_dir": model}
    async with in_process_gateway(exact_engine(), **settings) as gateway:
        exchange = gateway.request(CHAT, {"model": MODEL, "messages": MESSAGES})
        await exchange.done()
        assert exchange.status == 400
        assert "no user role here" in exchange.json()["error"]["message"]
        assert gateway.engine.calls.empty()
        assert gateway.settled()


async def test_with_the_estimate_chosen_nothing_is_asked_of_anyone() -> None:
    async with in_process_gateway(exact_engine(), prompt_tokens="estimate") as gateway:
        await estimated_once(gateway)


async def estimated_once(gateway: InProcessGateway) -> None:
    exchange = gateway.request(CHAT, {"model": MODEL, "messages": MESSAGES, "max_tokens": 8})
    completion = await gateway.engine.calls.get()
    assert completion.path == CHAT
    completion.answer(200, {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 8}})
    await exchange.done()
    assert counted(gateway, "estimate") == 1


async def test_nothing_is_counted_where_the_count_decides_nothing() -> None:
    """Admission off, no key's charge, routing that looks at no token ids:
    the request goes to the engine without a /tokenize before it."""
    settings: dict[str, Any] = {"prompt_tokens": "engine", "admission": "off"}
    async with in_process_gateway(exact_engine(), **settings) as gateway:
        await estimated_once_uncounted(gateway)
        assert counted(gateway, "engine") == 0
        assert gateway.engine.requests["/tokenize"] == 0


async def test_prefix_routing_counts_even_with_admission_off() -> None:
    settings: dict[str, Any] = {"prompt_tokens": "engine", "admission": "off", "routing": "prefix"}
    async with in_process_gateway(exact_engine(), **settings) as gateway:
        exchange = gateway.request(CHAT, {"model": MODEL, "messages": MESSAGES, "max_tokens": 8})
        tokenize = await gateway.engine.calls.get()
        assert tokenize.path == "/tokenize"
        tokenize.answer(200, tokenized(12))
        completion = await gateway.engine.calls.get()
        completion.answer(
            200, {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 8}}
        )
        await exchange.done()
        assert counted(gateway, "engine") == 1


async def estimated_once_uncounted(gateway: InProcessGateway) -> None:
    exchange = gateway.request(CHAT, {"model": MODEL, "messages": MESSAGES, "max_tokens": 8})
    completion = await gateway.engine.calls.get()
    assert completion.path == CHAT
    completion.answer(200, {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 8}})
    await exchange.done()
    assert exchange.status == 200


def test_an_operator_is_told_at_start_up_when_the_engine_counts_every_prompt() -> None:
    """The gateway alone, without the model's files: each request first pays
    a /tokenize round trip to the engine, and the start-up log says so."""
    note = counting_note(Settings())
    assert note is not None
    assert "GATEWAY_TOKENIZER_DIR" in note
    assert counting_note(Settings(prompt_tokens="estimate")) is None
    assert counting_note(Settings(tokenizer_dir=Path("/models/tiny"))) is None


async def test_the_tokenizer_is_read_once_an_engine_serves_the_model_before_any_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = counted_reads(monkeypatch)
    model = write_model(tmp_path / "tiny")
    settings: dict[str, Any] = {"prompt_tokens": "tokenizer", "tokenizer_dir": model}
    async with in_process_gateway(exact_engine(), **settings) as gateway:
        assert await wait_for(lambda: read == [model], timeout=30)
        assert gateway.engine.requests[CHAT] == 0
