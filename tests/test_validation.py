"""Checking completion requests (no engine, no I/O)."""

import json
from typing import Any

import pytest

from app.errors import GatewayError, InvalidRequest, ModelNotFound
from app.validation import check_request

MODELS = {"tiny": 2048}
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
]


@pytest.mark.parametrize(("route", "body", "error", "param"), BAD)
def test_bad_requests_are_refused_with_the_field_named(
    route: Any, body: dict[str, Any], error: type[GatewayError], param: str
) -> None:
    with pytest.raises(error) as caught:
        check_request(route, body, MODELS, max_n=16)
    assert caught.value.param == param
    assert 400 <= caught.value.status < 500
    assert caught.value.outcome == "rejected"


def test_a_good_chat_request_is_described_for_admission() -> None:
    job = check_request(
        "chat", {**CHAT, "max_completion_tokens": 50, "n": 2, "stream": True}, MODELS, 16
    )
    assert (job.model, job.stream, job.max_tokens, job.n) == ("tiny", True, 50, 2)
    assert job.prompt_text == "hi"
    assert not job.wants_usage


def test_streams_ask_the_engine_for_usage_and_keep_other_fields() -> None:
    job = check_request("chat", {**CHAT, "stream": True, "temperature": 0.5}, MODELS, 16)
    sent = json.loads(job.upstream_body())
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["temperature"] == 0.5
    assert "stream_options" not in json.loads(
        check_request("chat", CHAT, MODELS, 16).upstream_body()
    )


def test_a_client_that_asks_for_usage_gets_it() -> None:
    body = {**COMPLETION, "stream": True, "stream_options": {"include_usage": True}}
    assert check_request("completions", body, MODELS, 16).wants_usage


def test_prompts_given_as_token_ids_are_counted() -> None:
    job = check_request("completions", {**COMPLETION, "prompt": [1, 2, 3]}, MODELS, 16)
    assert (job.prompt_text, job.prompt_token_ids) == ("", 3)
    batch = check_request("completions", {**COMPLETION, "prompt": [[1, 2], [3]]}, MODELS, 16)
    assert batch.prompt_token_ids == 3


def test_chat_content_parts_count_as_prompt_text() -> None:
    body = {**CHAT, "messages": [{"role": "user", "content": [{"type": "text", "text": "abc"}]}]}
    assert check_request("chat", body, MODELS, 16).prompt_text == "abc"
