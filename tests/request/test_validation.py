"""Checking completion requests: ``check_request`` on its own (no engine, no
I/O), then bad input sent to the gateway in-process, where a clear 4xx in
OpenAI's shape answers it before any engine is asked. What the engine checks
itself (its sampling parameters) is tests/e2e/test_bad_input.py's."""

import json
from typing import Any

import pytest

from app.request.errors import GatewayError, InvalidRequest, ModelNotFound, TooLong
from app.request.validation import CompletionJob, Limits, Prompt, check_request
from tests.support.asgi import in_process_gateway
from tests.support.scripted_engine import MODEL

MODELS = {"tiny": 2048}
LIMITS = Limits(max_n=16, max_batch=4)


def check(route: Any, body: dict[str, Any], http_version: str = "1.1") -> CompletionJob:
    return check_request(route, body, MODELS, LIMITS, http_version)


CHAT: dict[str, Any] = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
COMPLETION: dict[str, Any] = {"model": "tiny", "prompt": "hi"}

BAD = [
    ("chat", {**CHAT, "model": "nope"}, ModelNotFound, "model"),
    ("chat", {"messages": CHAT["messages"]}, InvalidRequest, "model"),
    ("chat", {**CHAT, "model": 3}, InvalidRequest, "model"),
    ("chat", {"model": "tiny"}, InvalidRequest, "messages"),
    ("chat", {**CHAT, "messages": []}, InvalidRequest, "messages"),
    ("chat", {**CHAT, "messages": "hi"}, InvalidRequest, "messages"),
    ("chat", {**CHAT, "messages": [{"content": "hi"}]}, InvalidRequest, "messages.0.role"),
    ("chat", {**CHAT, "max_tokens": -1}, InvalidRequest, "max_tokens"),
    ("chat", {**CHAT, "max_tokens": 0}, InvalidRequest, "max_tokens"),
    ("chat", {**CHAT, "max_tokens": "10"}, InvalidRequest, "max_tokens"),
    ("chat", {**CHAT, "max_tokens": 10**9}, InvalidRequest, "max_tokens"),
    ("chat", {**CHAT, "max_completion_tokens": 5000}, InvalidRequest, "max_completion_tokens"),
    ("chat", {**CHAT, "stream": "yes"}, InvalidRequest, "stream"),
    ("chat", {**CHAT, "n": 0}, InvalidRequest, "n"),
    ("chat", {**CHAT, "n": 100}, InvalidRequest, "n"),
    ("chat", {**CHAT, "stream_options": {"include_usage": True}}, InvalidRequest, "stream_options"),
    ("completions", {"model": "tiny"}, InvalidRequest, "prompt"),
    ("completions", {**COMPLETION, "prompt": 5}, InvalidRequest, "prompt"),
    ("completions", {**COMPLETION, "prompt": []}, InvalidRequest, "prompt"),
    ("completions", {**COMPLETION, "max_tokens": True}, InvalidRequest, "max_tokens"),
    ("completions", {**COMPLETION, "prompt": ["a"] * 5}, InvalidRequest, "prompt"),
    ("completions", {**COMPLETION, "prompt": [[1], []]}, InvalidRequest, "prompt"),
    ("completions", {**COMPLETION, "prompt": [1] * 2048}, TooLong, "prompt"),
    ("completions", {**COMPLETION, "prompt": [[1], [1] * 3000]}, TooLong, "prompt"),
    ("completions", {**COMPLETION, "prompt": [1] * 2000, "max_tokens": 100}, TooLong, "max_tokens"),
    ("completions", {**COMPLETION, "prompt": "\ud800"}, InvalidRequest, None),
]


@pytest.mark.parametrize(("route", "body", "error", "param"), BAD)
def test_bad_requests_are_refused_with_the_field_named(
    route: Any, body: dict[str, Any], error: type[GatewayError], param: str
) -> None:
    with pytest.raises(error) as caught:
        check(route, body)
    assert caught.value.param == param
    assert 400 <= caught.value.status < 500
    assert caught.value.outcome == "rejected"


def test_a_good_chat_request_is_described_for_admission() -> None:
    job = check("chat", {**CHAT, "max_completion_tokens": 50, "n": 2, "stream": True})
    assert (job.model, job.stream, job.max_tokens, job.n) == ("tiny", True, 50, 2)
    assert job.prompts == (Prompt(text="hi"),)
    assert job.sequences == 2
    assert not job.wants_usage


def test_streams_ask_the_engine_for_usage_in_the_last_chunk_and_keep_other_fields() -> None:
    job = check("chat", {**CHAT, "stream": True, "temperature": 0.5})
    sent = json.loads(job.upstream_body)
    assert sent["stream_options"] == {"include_usage": True, "continuous_usage_stats": False}
    assert sent["temperature"] == 0.5
    assert "stream_options" not in json.loads(check("chat", CHAT).upstream_body)


def test_a_client_that_asks_for_usage_gets_it_as_asked() -> None:
    options = {"include_usage": True, "continuous_usage_stats": True}
    job = check("completions", {**COMPLETION, "stream": True, "stream_options": options})
    assert job.wants_usage
    assert json.loads(job.upstream_body)["stream_options"] == options


def test_prompts_given_as_token_ids_are_counted_and_batches_are_sequences() -> None:
    job = check("completions", {**COMPLETION, "prompt": [1, 2, 3]})
    assert job.prompts == (Prompt(ids=(1, 2, 3)),)
    batch = check("completions", {**COMPLETION, "prompt": [[1, 2], [3]], "n": 3})
    assert batch.prompts == (Prompt(ids=(1, 2)), Prompt(ids=(3,)))
    assert batch.sequences == 6
    texts = check("completions", {**COMPLETION, "prompt": ["a", "bc"]})
    assert texts.prompts == (Prompt(text="a"), Prompt(text="bc"))


def test_chat_content_parts_count_as_prompt_text() -> None:
    body = {**CHAT, "messages": [{"role": "user", "content": [{"type": "text", "text": "abc"}]}]}
    assert check("chat", body).prompts == (Prompt(text="abc"),)


def test_streaming_needs_http_1_1() -> None:
    with pytest.raises(InvalidRequest) as caught:
        check("chat", {**CHAT, "stream": True}, http_version="1.0")
    assert caught.value.param == "stream"
    assert not check("chat", CHAT, http_version="1.0").stream


# --- through the gateway, in-process ----------------------------------------------

CHAT_ROUTE = "/v1/chat/completions"
COMPLETIONS_ROUTE = "/v1/completions"
MESSAGES = [{"role": "user", "content": "hi"}]


def encoded(**fields: object) -> bytes:
    return json.dumps(fields).encode()


REFUSED = [
    # (name, path, raw body, status, param)
    ("not json", CHAT_ROUTE, b"{not json", 400, None),
    ("empty body", CHAT_ROUTE, b"", 400, None),
    ("json array", CHAT_ROUTE, b"[1, 2]", 400, None),
    ("missing model", CHAT_ROUTE, encoded(messages=MESSAGES), 400, "model"),
    ("unknown model", CHAT_ROUTE, encoded(model="gpt-9", messages=MESSAGES), 404, "model"),
    ("missing messages", CHAT_ROUTE, encoded(model=MODEL), 400, "messages"),
    ("messages not a list", CHAT_ROUTE, encoded(model=MODEL, messages="hi"), 400, "messages"),
    (
        "max_tokens a string",
        CHAT_ROUTE,
        encoded(model=MODEL, messages=MESSAGES, max_tokens="9"),
        400,
        "max_tokens",
    ),
    (
        "negative max_tokens",
        CHAT_ROUTE,
        encoded(model=MODEL, messages=MESSAGES, max_tokens=-5),
        400,
        "max_tokens",
    ),
    (
        "absurd max_tokens",
        CHAT_ROUTE,
        encoded(model=MODEL, messages=MESSAGES, max_tokens=10**9),
        400,
        "max_tokens",
    ),
    ("n too large", CHAT_ROUTE, encoded(model=MODEL, messages=MESSAGES, n=1000), 400, "n"),
    (
        "stream not a bool",
        CHAT_ROUTE,
        encoded(model=MODEL, messages=MESSAGES, stream="yes"),
        400,
        "stream",
    ),
    ("missing prompt", COMPLETIONS_ROUTE, encoded(model=MODEL), 400, "prompt"),
    ("prompt a number", COMPLETIONS_ROUTE, encoded(model=MODEL, prompt=3), 400, "prompt"),
    ("body too large", CHAT_ROUTE, b'{"model": "' + b"x" * (5 * 1024 * 1024) + b'"}', 413, None),
]


@pytest.mark.parametrize(
    ("name", "path", "raw", "status", "param"), REFUSED, ids=[case[0] for case in REFUSED]
)
async def test_bad_requests_get_their_documented_status(
    name: str, path: str, raw: bytes, status: int, param: str | None
) -> None:
    async with in_process_gateway() as gateway:
        exchange = await gateway.request(path, raw).done()
        assert exchange.status == status, exchange.body
        error = exchange.json()["error"]
        assert set(error) >= {"message", "type", "param", "code"}
        assert error["message"]
        assert error["param"] == param
        assert gateway.metric("gateway_requests_total") == 1
        assert gateway.metric("gateway_requests_total", outcome="rejected") == 1
        assert gateway.engine.calls.empty()


async def test_refusals_are_counted_as_rejected() -> None:
    async with in_process_gateway() as gateway:
        rejected = gateway.metric("gateway_requests_total", outcome="rejected")
        too_large = gateway.metric("gateway_rejections_total", reason="too_large")
        await gateway.request(CHAT_ROUTE, b"{").done()
        await gateway.request(CHAT_ROUTE, b"x" * (5 * 1024 * 1024)).done()
        assert gateway.metric("gateway_requests_total", outcome="rejected") == rejected + 2
        assert gateway.metric("gateway_rejections_total", reason="too_large") == too_large + 1
