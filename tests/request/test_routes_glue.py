"""The Responses API and embeddings through the pipeline's glue, in-process
against scripted engines: what each engine is sent, how each stream ends,
which engine a continued or stored response goes to, and the exact charge
of a stream cut short. What real engines do with them is
tests/e2e/test_responses.py's and tests/e2e/test_embeddings.py's."""

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.asgi import Exchange, InProcessGateway, in_process_gateway
from tests.support.asgi_streams import events
from tests.support.keys import key_entry, write_keys_file
from tests.support.scripted_engine import MODEL, EngineCall, ScriptedEngine, next_call

RESPONSES = "/v1/responses"
EMBEDDINGS = "/v1/embeddings"
REQUEST: dict[str, Any] = {"model": MODEL, "input": "Hello there", "max_output_tokens": 8}
USAGE = {"input_tokens": 9, "output_tokens": 5, "total_tokens": 14}


def event(kind: str, **data: Any) -> bytes:
    payload = json.dumps({**data, "type": kind}, separators=(",", ":"))
    return f"event: {kind}\ndata: {payload}\n\n".encode()


def delta(text: str) -> bytes:
    return event("response.output_text.delta", delta=text, item_id="msg_1", output_index=0)


def completed(response_id: str, usage: dict[str, int] = USAGE) -> bytes:
    return event("response.completed", response={"id": response_id, "usage": usage})


def answered(call: EngineCall, response_id: str | None = None) -> None:
    """A whole response, as vLLM answers a call that does not stream."""
    rid = response_id or call.body["request_id"]
    call.answer(200, {"id": rid, "object": "response", "output": [], "usage": USAGE})


async def served(gateway: InProcessGateway, body: dict[str, Any], **headers: str) -> Exchange:
    exchange = gateway.request(RESPONSES, body, headers=headers)
    call = await gateway.engine.calls.get()
    answered(call)
    return await exchange.done()


async def test_a_response_is_named_by_the_gateway_and_counted_by_its_usage() -> None:
    async with in_process_gateway() as gateway:
        exchange = gateway.request(RESPONSES, {**REQUEST, "request_id": "mine"})
        call = await gateway.engine.calls.get()
        assert call.path == RESPONSES
        assert call.body["request_id"] == "resp_" + call.headers["x-request-id"]
        answered(call)
        await exchange.done()
        assert exchange.status == 200
        assert exchange.json()["id"] == call.body["request_id"]
        assert gateway.metric("gateway_requests_total", route="responses", outcome="completed") == 1
        assert gateway.metric("gateway_tokens_total", kind="prompt") == 9
        assert gateway.metric("gateway_tokens_total", kind="completion") == 5
        assert gateway.settled()


async def test_a_response_stream_ends_whole_with_response_completed() -> None:
    async with in_process_gateway() as gateway:
        exchange = gateway.request(RESPONSES, {**REQUEST, "stream": True})
        call = await gateway.engine.calls.get()
        call.stream()
        rid = call.body["request_id"]
        sent = [event("response.created", response={"id": rid}), delta("Hel"), delta("lo")]
        for part in [*sent, completed(rid)]:
            call.send(part)
        call.end()
        await exchange.done()
        assert exchange.body == b"".join(sent) + completed(rid)
        assert gateway.metric("gateway_requests_total", route="responses", outcome="completed") == 1
        assert gateway.metric("gateway_tokens_total", kind="completion") == 5
        assert gateway.metric("gateway_time_to_first_token_seconds_count") == 1


async def test_a_response_stream_without_response_completed_is_a_failure() -> None:
    async with in_process_gateway() as gateway:
        exchange = gateway.request(RESPONSES, {**REQUEST, "stream": True})
        call = await gateway.engine.calls.get()
        call.stream()
        call.send(delta("Hel"))
        call.end()
        await exchange.done()
        last = events(exchange)[-1]
        assert last.startswith(b"event: error\ndata: {")
        assert json.loads(last.split(b"data: ", 1)[1])["error"]["code"] == "engine_error"
        assert gateway.metric("gateway_requests_total", route="responses", outcome="failed") == 1
        assert gateway.settled()


async def test_a_continued_response_goes_to_the_engine_that_holds_it() -> None:
    """Even while that engine is the busier one: the continuations are held
    open there, and the other engine stays idle."""
    fleet = [ScriptedEngine(), ScriptedEngine()]
    async with in_process_gateway(fleet=fleet) as gateway:
        exchange = gateway.request(RESPONSES, REQUEST)
        holder, call = await next_call(*fleet)
        first = call.body["request_id"]
        answered(call)
        await exchange.done()
        held = []
        for _ in range(3):
            body = {**REQUEST, "previous_response_id": first, "stream": True}
            exchange = gateway.request(RESPONSES, body)
            engine, call = await next_call(*fleet)
            assert engine is holder
            assert call.body["previous_response_id"] == first
            call.stream()
            held.append((exchange, call))
        for exchange, call in held:
            call.send(completed(call.body["request_id"]))
            call.end()
            assert (await exchange.done()).status == 200


async def test_another_tenants_response_is_not_found() -> None:
    async with in_process_gateway() as gateway:
        first = (await served(gateway, REQUEST, **{"x-tenant-id": "acme"})).json()["id"]
        body = {**REQUEST, "previous_response_id": first}
        async with asyncio.timeout(10):  # not left waiting for an engine
            refused = await gateway.request(
                RESPONSES, body, headers={"x-tenant-id": "globex"}
            ).done()
        assert refused.status == 404
        assert refused.json()["error"]["code"] == "response_not_found"
        retrieved = gateway.request(f"{RESPONSES}/{first}", method="GET")
        async with asyncio.timeout(10):
            assert (await retrieved.done()).status == 404  # anonymous is not acme either
        assert gateway.engine.calls.empty()


async def test_a_response_the_gateway_does_not_remember_is_looked_for() -> None:
    """Made through another replica, or forgotten: the engines are asked."""
    fleet = [ScriptedEngine(), ScriptedEngine()]
    async with in_process_gateway(fleet=fleet) as gateway:
        body = {**REQUEST, "previous_response_id": "resp_elsewhere"}
        exchange = gateway.request(RESPONSES, body)
        asked = []
        for _ in range(2):
            engine, call = await next_call(*fleet)
            assert (call.method, call.path) == ("GET", f"{RESPONSES}/resp_elsewhere")
            asked.append(engine)
            if engine is fleet[1]:
                call.answer(200, {"id": "resp_elsewhere", "usage": USAGE})
                break
            call.answer(404, {"error": {"message": "not found", "code": 404}})
        engine, call = await next_call(*fleet)
        assert engine is fleet[1]
        assert call.path == RESPONSES
        answered(call)
        assert (await exchange.done()).status == 200
        # Found once, remembered: the next continuation asks no one.
        again = gateway.request(RESPONSES, body)
        engine, call = await next_call(*fleet)
        assert (engine, call.path) == (fleet[1], RESPONSES)
        answered(call)
        await again.done()


async def test_a_response_no_engine_holds_is_a_404_before_admission() -> None:
    async with in_process_gateway() as gateway:
        body = {**REQUEST, "previous_response_id": "resp_nowhere"}
        exchange = gateway.request(RESPONSES, body)
        call = await gateway.engine.calls.get()
        assert call.method == "GET"
        call.answer(404, {"error": {"message": "not found", "code": 404}})
        await exchange.done()
        assert exchange.status == 404
        assert gateway.metric("gateway_requests_total", route="responses", outcome="rejected") == 1
        assert gateway.engine.calls.empty()


async def test_only_a_completed_response_is_remembered() -> None:
    """vLLM stores a response when it completes: one whose client left is
    not the engine's to hold, and the gateway does not claim it is."""
    async with in_process_gateway() as gateway:
        exchange = gateway.request(RESPONSES, {**REQUEST, "stream": True})
        call = await gateway.engine.calls.get()
        call.stream()
        rid = call.body["request_id"]
        call.send(delta("Hel"))
        await exchange.wait_for(lambda e: b".delta" in e.body)
        exchange.disconnect()
        await exchange.done()
        assert gateway.services.responses.held.recall(rid) is None
        done = await served(gateway, REQUEST)
        assert gateway.services.responses.held.recall(done.json()["id"]) is not None


async def test_a_stored_response_is_read_and_cancelled_on_its_engine() -> None:
    fleet = [ScriptedEngine(), ScriptedEngine()]
    async with in_process_gateway(fleet=fleet) as gateway:
        exchange = gateway.request(RESPONSES, REQUEST)
        holder, call = await next_call(*fleet)
        rid = call.body["request_id"]
        answered(call)
        await exchange.done()
        for method, path in (("GET", f"{RESPONSES}/{rid}"), ("POST", f"{RESPONSES}/{rid}/cancel")):
            exchange = gateway.request(path, method=method)
            engine, call = await next_call(*fleet)
            assert (engine, call.method, call.path) == (holder, method, path)
            call.answer(400, {"error": {"message": "Cannot cancel a synchronous response."}})
            assert (await exchange.done()).status == 400
        streamed = await gateway.request(f"{RESPONSES}/{rid}?stream=true", method="GET").done()
        assert streamed.status == 400


async def test_a_response_whose_engine_left_the_fleet_is_not_found() -> None:
    async with in_process_gateway() as gateway:
        rid = (await served(gateway, REQUEST)).json()["id"]
        gateway.services.engines.views.clear()
        exchange = await gateway.request(f"{RESPONSES}/{rid}", method="GET").done()
        assert exchange.status == 404
        assert "left the fleet" in exchange.json()["error"]["message"]


async def test_an_embedding_reserves_its_input_alone() -> None:
    async with in_process_gateway(kv_block_size=1) as gateway:
        exchange = gateway.request(EMBEDDINGS, {"model": MODEL, "input": [[1, 2, 3], [4, 5]]})
        call = await gateway.engine.calls.get()
        assert call.path == EMBEDDINGS
        assert "cache_salt" not in call.body
        # Five tokens of input, nothing generated: five one-token blocks.
        assert gateway.metric("gateway_kv_tokens_reserved") == 5
        call.answer(200, {"data": [], "usage": {"prompt_tokens": 5, "total_tokens": 5}})
        await exchange.done()
        assert exchange.status == 200
        assert gateway.metric("gateway_requests_total", route="embeddings", outcome="completed")
        assert gateway.metric("gateway_tokens_total", kind="prompt") == 5
        assert gateway.settled()


# --- a stream charged to a key -------------------------------------------------


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    charged = key_entry("acme-1", "acme", "key-acme", tokens_per_minute=10_000)
    free = key_entry("globex-1", "globex", "key-globex")
    return write_keys_file(tmp_path / "keys.yaml", [charged, free])


def chat_chunk(text: str, completion: int | None) -> bytes:
    usage = (
        ""
        if completion is None
        else f',"usage":{{"prompt_tokens":4,"total_tokens":{4 + completion},'
        f'"completion_tokens":{completion}}}'
    )
    head = '{"id":"chatcmpl-1","object":"chat.completion.chunk","model":"tiny",'
    choice = f'"choices":[{{"index":0,"delta":{{"content":"{text}"}},"finish_reason":null}}]'
    return f"data: {head}{choice}{usage}}}\n\n".encode()


CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}


async def test_a_charged_stream_cut_short_pays_what_the_engine_last_reported(
    keys_file: Path,
) -> None:
    async with in_process_gateway(keys_file=keys_file) as gateway:
        headers = {"authorization": "Bearer key-acme"}
        exchange = gateway.request("/v1/chat/completions", CHAT, headers=headers)
        call = await gateway.engine.calls.get()
        assert call.body["stream_options"] == {
            "include_usage": True,
            "continuous_usage_stats": True,
        }
        call.stream()
        # Eight tokens a chunk (a client's stream_interval), usage in each.
        call.send(chat_chunk("abcdefgh", 8) + chat_chunk("ijklmnop", 16))
        await exchange.wait_for(lambda e: e.body.count(b"data:") >= 2)
        # What the client got is what the engine writes without the usage.
        assert exchange.body == chat_chunk("abcdefgh", None) + chat_chunk("ijklmnop", None)
        exchange.disconnect()
        await exchange.done()
        assert gateway.metric("gateway_tenant_tokens_total", tenant="acme", kind="used") == 4 + 16
        assert gateway.settled()


async def test_a_stream_not_charged_asks_for_no_usage_per_chunk(keys_file: Path) -> None:
    async with in_process_gateway(keys_file=keys_file) as gateway:
        headers = {"authorization": "Bearer key-globex"}
        exchange = gateway.request("/v1/chat/completions", CHAT, headers=headers)
        call = await gateway.engine.calls.get()
        assert call.body["stream_options"]["continuous_usage_stats"] is False
        call.answer(200, {})
        await exchange.done()


async def test_a_charged_response_stream_cut_short_pays_at_least_what_it_was_sent(
    keys_file: Path,
) -> None:
    """No usage per event in the Responses API: the text's bytes bound the
    tokens from above (every token writes a byte), the output bound caps it."""
    async with in_process_gateway(keys_file=keys_file) as gateway:
        headers = {"authorization": "Bearer key-acme"}
        body = {**REQUEST, "max_output_tokens": 100, "stream": True}
        exchange = gateway.request(RESPONSES, body, headers=headers)
        call = await gateway.engine.calls.get()
        call.stream()
        call.send(delta("four") + delta("é"))
        await exchange.wait_for(lambda e: e.body.count(b".delta\n") >= 2)
        exchange.disconnect()
        await exchange.done()
        used = gateway.metric("gateway_tenant_tokens_total", tenant="acme", kind="used")
        charged = gateway.metric("gateway_tenant_tokens_total", tenant="acme", kind="admitted")
        prompt = charged - 100
        assert used == prompt + 4 + 2
