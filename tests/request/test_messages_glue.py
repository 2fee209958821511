"""Anthropic Messages through the pipeline's glue, in-process against a
scripted engine that sends what vLLM 0.32 sends (its events and error
bodies as captured from the real engine): a message whole and streamed
(ended by ``message_stop``), its prompt counted with its cache reads and
writes, errors in Anthropic's shape — the gateway's own, the engine's passed
on or rewrapped, a stream's last event —, a key presented as ``x-api-key``,
the charge of a stream cut short, and ``count_tokens`` passed through. What
the real engine and the ``anthropic`` SDK do with them is
tests/e2e/test_messages.py's."""

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.asgi import in_process_gateway
from tests.support.keys import key_entry, write_keys_file
from tests.support.scripted_engine import MODEL

MESSAGES = "/v1/messages"
REQUEST: dict[str, Any] = {
    "model": MODEL,
    "max_tokens": 8,
    "messages": [{"role": "user", "content": "Hello there"}],
}


def event(kind: str, **data: Any) -> bytes:
    payload = json.dumps({"type": kind, **data}, separators=(",", ":"))
    return f"event: {kind}\ndata: {payload}\n\n".encode()


def start(input_tokens: int = 9) -> bytes:
    message: dict[str, Any] = {
        "id": "chatcmpl-1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": MODEL,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 0},
    }
    return event("message_start", message=message)


def text(piece: str) -> bytes:
    return event("content_block_delta", index=0, delta={"type": "text_delta", "text": piece})


def end(usage: dict[str, int]) -> bytes:
    delta = {"stop_reason": "max_tokens", "stop_sequence": None}
    return (
        event("content_block_stop", index=0)
        + event("message_delta", delta=delta, usage=usage)
        + event("message_stop")
    )


def anthropic_error(body: bytes) -> dict[str, Any]:
    parsed = json.loads(body)
    assert parsed["type"] == "error"
    assert set(parsed["error"]) >= {"type", "message"}
    error: dict[str, Any] = parsed["error"]
    return error


async def test_a_whole_message_counts_its_cache_reads_as_prompt() -> None:
    async with in_process_gateway() as gateway:
        exchange = gateway.request(MESSAGES, REQUEST)
        call = await gateway.engine.calls.get()
        assert call.path == MESSAGES
        assert "cache_salt" not in call.body or call.body["cache_salt"]
        usage = {"input_tokens": 5, "cache_read_input_tokens": 4, "output_tokens": 3}
        call.answer(200, {"id": "chatcmpl-1", "type": "message", "content": [], "usage": usage})
        await exchange.done()
        assert exchange.status == 200
        assert gateway.metric("gateway_requests_total", route="messages", outcome="completed")
        assert gateway.metric("gateway_tokens_total", kind="prompt") == 9
        assert gateway.metric("gateway_tokens_total", kind="completion") == 3
        assert gateway.settled()


async def test_a_message_stream_passes_through_and_ends_with_message_stop() -> None:
    async with in_process_gateway() as gateway:
        exchange = gateway.request(MESSAGES, {**REQUEST, "stream": True})
        call = await gateway.engine.calls.get()
        call.stream()
        sent = [start(), text("Hel"), text("lo"), end({"input_tokens": 9, "output_tokens": 2})]
        for part in sent:
            call.send(part)
        call.end()
        await exchange.done()
        assert exchange.body == b"".join(sent)
        assert gateway.metric("gateway_requests_total", route="messages", outcome="completed")
        assert gateway.metric("gateway_tokens_total", kind="prompt") == 9
        assert gateway.metric("gateway_tokens_total", kind="completion") == 2
        assert gateway.settled()


async def test_a_stream_the_engine_ends_early_ends_with_an_anthropic_error_event() -> None:
    async with in_process_gateway() as gateway:
        exchange = gateway.request(MESSAGES, {**REQUEST, "stream": True})
        call = await gateway.engine.calls.get()
        call.stream()
        call.send(start() + text("Hel"))
        await exchange.wait_for(lambda e: b"content_block_delta" in e.body)
        call.end()
        await exchange.done()
        last = exchange.body.rsplit(b"\n\n", 2)[-2]
        assert last.startswith(b"event: error\ndata: ")
        error = anthropic_error(last.split(b"data: ", 1)[1])
        assert error["type"] == "api_error"
        assert "message_stop" in error["message"]
        assert gateway.metric("gateway_requests_total", route="messages", outcome="failed") == 1


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({k: v for k, v in REQUEST.items() if k != "max_tokens"}, "max_tokens"),
        ({**REQUEST, "max_tokens": 0}, "max_tokens"),
        ({**REQUEST, "messages": []}, "messages"),
        ({**REQUEST, "messages": [{"role": "tool", "content": "x"}]}, "messages"),
    ],
    ids=["no max_tokens", "max_tokens 0", "no messages", "an unknown role"],
)
async def test_a_bad_body_is_an_anthropic_400_the_engine_never_sees(
    body: dict[str, Any], param: str
) -> None:
    async with in_process_gateway() as gateway:
        exchange = await gateway.request(MESSAGES, body).done()
        assert exchange.status == 400
        error = anthropic_error(exchange.body)
        assert error["type"] == "invalid_request_error"
        assert error["message"].startswith(param)
        assert gateway.engine.calls.empty()


async def test_the_engines_anthropic_error_passes_as_it_is() -> None:
    body = b'{"type":"error","error":{"type":"NotFoundError","message":"no such thing"}}'
    async with in_process_gateway() as gateway:
        exchange = gateway.request(MESSAGES, REQUEST)
        call = await gateway.engine.calls.get()
        call.answer(404, json.loads(body))
        await exchange.done()
        assert exchange.status == 404
        assert json.loads(exchange.body) == json.loads(body)


async def test_the_engines_openai_error_is_rewrapped_in_anthropics_shape() -> None:
    async with in_process_gateway() as gateway:
        exchange = gateway.request(MESSAGES, REQUEST)
        call = await gateway.engine.calls.get()
        error = {"message": "temperature: bad", "type": "BadRequestError", "param": None}
        call.answer(400, {"error": {**error, "code": 400}})
        await exchange.done()
        assert exchange.status == 400
        assert anthropic_error(exchange.body) == {
            "type": "invalid_request_error",
            "message": "temperature: bad",
        }


async def test_a_capacity_refusal_is_an_overloaded_error_with_retry_after() -> None:
    """The one slot held, the next request's deadline passes in the queue."""
    async with in_process_gateway(max_concurrency=1, queue_timeout=0.3) as gateway:
        holder = gateway.request(MESSAGES, REQUEST)
        call = await gateway.engine.calls.get()
        refused = await gateway.request(MESSAGES, REQUEST).done()
        assert refused.status == 429
        assert int(refused.headers["retry-after"]) >= 1
        assert anthropic_error(refused.body)["type"] == "overloaded_error"
        assert gateway.metric("gateway_rejections_total", reason="queue_timeout") == 1
        call.answer(200, {"usage": {"input_tokens": 1, "output_tokens": 1}})
        await holder.done()


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    charged = key_entry("acme-1", "acme", "key-acme", tokens_per_minute=10_000)
    return write_keys_file(tmp_path / "keys.yaml", [charged])


async def test_a_key_is_presented_as_x_api_key_and_a_wrong_one_refused_in_anthropics_shape(
    keys_file: Path,
) -> None:
    async with in_process_gateway(keys_file=keys_file) as gateway:
        wrong = await gateway.request(MESSAGES, REQUEST, headers={"x-api-key": "nope"}).done()
        assert wrong.status == 401
        assert anthropic_error(wrong.body)["type"] == "authentication_error"
        exchange = gateway.request(MESSAGES, REQUEST, headers={"x-api-key": "key-acme"})
        call = await gateway.engine.calls.get()
        assert "x-api-key" not in call.headers
        call.answer(200, {"usage": {"input_tokens": 3, "output_tokens": 2}})
        await exchange.done()
        assert exchange.status == 200
        assert gateway.metric("gateway_tenant_tokens_total", tenant="acme", kind="used") == 5


async def test_a_charged_stream_cut_short_pays_its_prompt_and_what_it_was_sent(
    keys_file: Path,
) -> None:
    """The prompt from ``message_start``; no usage per delta, so the text's
    bytes bound the output from above (every token writes a byte)."""
    async with in_process_gateway(keys_file=keys_file) as gateway:
        headers = {"x-api-key": "key-acme"}
        body = {**REQUEST, "max_tokens": 100, "stream": True}
        exchange = gateway.request(MESSAGES, body, headers=headers)
        call = await gateway.engine.calls.get()
        call.stream()
        call.send(start(input_tokens=12) + text("four") + text("é"))
        await exchange.wait_for(lambda e: e.body.count(b"content_block_delta\n") >= 2)
        exchange.disconnect()
        await exchange.done()
        used = gateway.metric("gateway_tenant_tokens_total", tenant="acme", kind="used")
        assert used == 12 + 4 + 2
        assert gateway.metric("gateway_requests_total", route="messages", outcome="cancelled")
        assert gateway.settled()


async def test_count_tokens_passes_through_not_admitted() -> None:
    async with in_process_gateway(max_concurrency=1) as gateway:
        body = {"model": MODEL, "messages": REQUEST["messages"]}
        exchange = gateway.request("/v1/messages/count_tokens", body)
        call = await gateway.engine.calls.get()
        assert call.path == "/v1/messages/count_tokens"
        assert call.body == body
        call.answer(200, {"input_tokens": 11})
        await exchange.done()
        assert exchange.json() == {"input_tokens": 11}
        assert gateway.metric("gateway_requests_total", route="messages") == 0
        missing = await gateway.request("/v1/messages/count_tokens", {"messages": []}).done()
        assert missing.status == 400
        assert anthropic_error(missing.body)["type"] == "invalid_request_error"
