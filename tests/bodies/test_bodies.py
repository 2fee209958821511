"""The Responses API's, Anthropic Messages', batch chat's and the
embeddings' bodies (``app.bodies``), through
``check_request``: what admission and counting learn from them, what the
engine is sent, and what is refused with the field named. Chat and
completion bodies are tests/request/test_validation.py's."""

import json
from typing import Any

import pytest

from app.bodies.responses import chat_messages
from app.request.errors import GatewayError, InvalidRequest, TooLong
from app.request.owned_fields import SALT, CacheScope
from app.request.validation import CompletionJob, Limits, Prompt, check_request

MODELS = {"tiny": 2048}
LIMITS = Limits(max_n=16, max_batch=4)
RESPONSE: dict[str, Any] = {"model": "tiny", "input": "Hello there"}
EMBEDDING: dict[str, Any] = {"model": "tiny", "input": "Hello there"}
USER = [{"role": "user", "content": "hi"}]
MESSAGE: dict[str, Any] = {"model": "tiny", "max_tokens": 8, "messages": USER}
BATCH: dict[str, Any] = {"model": "tiny", "max_tokens": 8, "messages": [USER, USER]}


def check(route: Any, body: dict[str, Any], **kwargs: Any) -> CompletionJob:
    return check_request(route, body, MODELS, LIMITS, "1.1", **kwargs)


def sent(job: CompletionJob) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(job.upstream_body)
    return body


BAD = [
    ("responses", {"model": "tiny"}, InvalidRequest, "input"),
    ("responses", {**RESPONSE, "input": 5}, InvalidRequest, "input"),
    ("responses", {**RESPONSE, "max_output_tokens": 0}, InvalidRequest, "max_output_tokens"),
    ("responses", {**RESPONSE, "max_output_tokens": 5000}, InvalidRequest, "max_output_tokens"),
    ("responses", {**RESPONSE, "background": True}, InvalidRequest, "background"),
    ("responses", {**RESPONSE, "previous_response_id": ""}, InvalidRequest, "previous_response_id"),
    ("embeddings", {"model": "tiny"}, InvalidRequest, "input"),
    ("embeddings", {**EMBEDDING, "input": []}, InvalidRequest, "input"),
    ("embeddings", {**EMBEDDING, "input": ["a"] * 5}, InvalidRequest, "input"),
    ("embeddings", {**EMBEDDING, "stream": True}, InvalidRequest, "stream"),
    ("embeddings", {**EMBEDDING, "input": [1] * 2049}, TooLong, "prompt"),
    ("messages", {"model": "tiny", "messages": USER}, InvalidRequest, "max_tokens"),
    ("messages", {**MESSAGE, "messages": []}, InvalidRequest, "messages"),
    ("messages", {**MESSAGE, "max_tokens": 5000}, InvalidRequest, "max_tokens"),
    ("messages", {**MESSAGE, "system": 5}, InvalidRequest, "system"),
    ("batch_chat", {**BATCH, "messages": []}, InvalidRequest, "messages"),
    ("batch_chat", {**BATCH, "messages": [USER, []]}, InvalidRequest, "messages"),
    ("batch_chat", {**BATCH, "messages": USER}, InvalidRequest, "messages.0"),
    ("batch_chat", {**BATCH, "messages": [USER] * 5}, InvalidRequest, "messages"),
    ("batch_chat", {**BATCH, "stream": True}, InvalidRequest, "stream"),
    ("batch_chat", {**BATCH, "tools": [{"type": "function"}]}, InvalidRequest, "tools"),
    ("batch_chat", {**BATCH, "n": 2}, InvalidRequest, "n"),
    ("batch_chat", {**BATCH, "max_tokens": 5000}, InvalidRequest, "max_tokens"),
    ("pooling", {"model": "tiny", "messages": USER}, InvalidRequest, "messages"),
    ("pooling", {"model": "tiny", "input": []}, InvalidRequest, "input"),
    ("classify", {"model": "tiny", "messages": USER}, InvalidRequest, "messages"),
    ("classify", {"model": "tiny", "input": []}, InvalidRequest, "input"),
    ("score", {"model": "tiny", "text_1": "a"}, InvalidRequest, "text_1"),
    ("score", {"model": "tiny", "text_1": ["a", "b"], "text_2": ["c"]}, InvalidRequest, "text_2"),
    ("score", {"model": "tiny", "queries": "a", "documents": []}, InvalidRequest, "documents"),
    ("score", {"text_1": "a", "text_2": "b"}, InvalidRequest, "model"),
    ("score", {"model": "tiny", "text_1": "a", "text_2": ["b"] * 5}, InvalidRequest, "text_2"),
    ("rerank", {"model": "tiny", "documents": ["a"]}, InvalidRequest, "query"),
    ("rerank", {"model": "tiny", "query": ["a", "b"], "documents": ["a"]}, InvalidRequest, "query"),
    (
        "rerank",
        {"model": "tiny", "query": "a", "documents": ["b", ""]},
        InvalidRequest,
        "documents",
    ),
]


@pytest.mark.parametrize(("route", "body", "error", "param"), BAD)
def test_bad_bodies_are_refused_with_the_field_named(
    route: Any, body: dict[str, Any], error: type[GatewayError], param: str
) -> None:
    with pytest.raises(error) as caught:
        check(route, body)
    assert caught.value.param == param
    assert caught.value.status == 400


def test_a_response_is_bounded_by_max_output_tokens_and_named_by_the_gateway() -> None:
    job = check(
        "responses",
        {**RESPONSE, "max_output_tokens": 40, "stream": True, "request_id": "mine"},
        request_id="abc123",
    )
    assert (job.route, job.max_tokens, job.stream, job.n) == ("responses", 40, True, 1)
    assert job.response_id == "resp_abc123"
    assert sent(job)["request_id"] == "resp_abc123"
    # Its stream ends with response.completed, carrying usage: nothing to ask for.
    assert "stream_options" not in sent(job)
    assert not job.chunk_usage


def test_a_responses_prompt_is_counted_as_the_chat_messages_vllm_renders() -> None:
    job = check("responses", {**RESPONSE, "instructions": "Be brief"})
    assert job.tokenize_body == {
        "messages": [
            {"role": "system", "content": "Be brief"},
            {"role": "user", "content": "Hello there"},
        ]
    }
    assert job.prompts == (Prompt(text="Be brief\nHello there"),)


def test_message_items_become_messages_an_assistants_first_part_only() -> None:
    parts = [{"type": "input_text", "text": "Hello"}, {"type": "input_text", "text": "there"}]
    items: list[dict[str, Any]] = [
        {"role": "user", "content": parts},
        {
            "type": "message",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "Hi"},
                {"type": "output_text", "text": "!"},
            ],
        },
        {"role": "developer", "content": "Go on"},
    ]
    assert chat_messages(None, items) == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}],
        },
        {"role": "assistant", "content": "Hi"},
        {"role": "developer", "content": "Go on"},
    ]


@pytest.mark.parametrize(
    "item",
    [
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
        {"type": "reasoning", "id": "r1", "summary": []},
        {"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]},
    ],
    ids=["function-call", "function-output", "reasoning", "image"],
)
def test_what_is_not_plain_messages_is_left_to_the_estimate(item: dict[str, Any]) -> None:
    job = check("responses", {**RESPONSE, "input": [{"role": "user", "content": "x"}, item]})
    assert job.tokenize_body is None


def test_a_response_with_tools_is_left_to_the_estimate() -> None:
    tools = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]
    assert check("responses", {**RESPONSE, "tools": tools}).tokenize_body is None


def test_a_continued_response_names_what_it_continues() -> None:
    job = check("responses", {**RESPONSE, "previous_response_id": "resp_1"})
    assert job.previous_response_id == "resp_1"
    assert sent(job)["previous_response_id"] == "resp_1"


def test_an_embedding_generates_nothing_and_takes_no_salt() -> None:
    job = check("embeddings", {**EMBEDDING, SALT: "user-1"}, cache_scope=CacheScope("acme"))
    assert not job.generates
    assert job.max_tokens is None
    assert job.cache_salt is None
    assert SALT not in sent(job)


def test_an_embeddings_batch_is_one_prompt_per_input() -> None:
    job = check("embeddings", {**EMBEDDING, "input": ["a", "b", "c"]})
    assert job.prompts == (Prompt(text="a"), Prompt(text="b"), Prompt(text="c"))
    ids = check("embeddings", {**EMBEDDING, "input": [[1, 2], [3]]})
    assert ids.prompts == (Prompt(ids=(1, 2)), Prompt(ids=(3,)))
    # Token ids as long as the context fit: nothing is generated after them.
    assert check("embeddings", {**EMBEDDING, "input": [1] * 2048}).prompts[0].counted == 2048


def test_a_batch_of_conversations_is_one_prompt_each() -> None:
    other = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "yo"}]
    job = check("batch_chat", {**BATCH, "messages": [USER, other]}, cache_scope=CacheScope("t"))
    assert [prompt.text for prompt in job.prompts] == ["hi", "Be brief.\nyo"]
    assert (job.sequences, job.max_tokens, job.stream) == (2, 8, False)
    assert sent(job)[SALT]


def test_a_messages_prompt_is_counted_as_the_chat_vllm_renders() -> None:
    body = {
        **MESSAGE,
        "system": [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
        ],
    }
    job = check("messages", body)
    assert job.tokenize_body == {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
        ]
    }
    assert (job.max_tokens, job.stream) == (8, False)


@pytest.mark.parametrize(
    "change",
    [
        {"tools": [{"name": "f", "input_schema": {}}]},
        {"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
        {"messages": [{"role": "system", "content": "inline"}, *USER]},
    ],
    ids=["tools", "an image", "a system message among the messages"],
)
def test_a_messages_prompt_vllm_renders_its_own_way_is_estimated(change: dict[str, Any]) -> None:
    assert check("messages", {**MESSAGE, **change}).tokenize_body is None


@pytest.mark.parametrize(
    ("first", "second"),
    [("text_1", "text_2"), ("queries", "documents"), ("queries", "items"), ("data_1", "data_2")],
)
def test_a_score_is_one_prompt_per_pair_under_each_of_its_names(first: str, second: str) -> None:
    job = check("score", {"model": "tiny", first: "q", second: ["d1", "d2"]})
    assert [prompt.text for prompt in job.prompts] == ["q\nd1", "q\nd2"]
    assert not job.generates
    paired = check("score", {"model": "tiny", first: ["a", "b"], second: ["c", "d"]})
    assert [prompt.text for prompt in paired.prompts] == ["a\nc", "b\nd"]


def test_a_rerank_is_its_query_with_each_document() -> None:
    job = check("rerank", {"model": "tiny", "query": "q", "documents": ["d1", "d2", "d3"]})
    assert [prompt.text for prompt in job.prompts] == ["q\nd1", "q\nd2", "q\nd3"]
    assert SALT not in sent(job)
