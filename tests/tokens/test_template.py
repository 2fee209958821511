"""Chat templates rendered as vLLM renders them, and declined where the
gateway could not render them exactly."""

from typing import Any

import jinja2
import pytest

from app.tokens.template import ChatTemplate

PLAIN = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}<|end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
WALKS_PARTS = (
    "{% for message in messages %}{% for part in message['content'] %}{{ part['text'] }}"
    "{% endfor %}{% endfor %}"
)


def chat(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages), **fields}


USER = {"role": "user", "content": "hi"}


def test_a_plain_chat_renders_with_the_generation_prompt_by_default() -> None:
    template = ChatTemplate(PLAIN, {})
    body = chat({"role": "system", "content": "Be brief."}, USER)
    assert template.renders(body)
    assert template.render(body) == "<|system|>Be brief.<|end|>\n<|user|>hi<|end|>\n<|assistant|>"
    no_prompt = {**body, "add_generation_prompt": False}
    assert template.render(no_prompt) == "<|system|>Be brief.<|end|>\n<|user|>hi<|end|>\n"


def test_text_parts_are_one_string_joined_by_newlines_as_vllm_joins_them() -> None:
    parts = [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    body = chat({"role": "user", "content": parts})
    template = ChatTemplate(PLAIN, {})
    assert template.renders(body)
    assert template.render(body) == "<|user|>one\ntwo<|end|>\n<|assistant|>"


def test_special_tokens_and_the_requests_template_kwargs_are_variables() -> None:
    source = "{{ bos_token }}{% if flavour %}{{ flavour }}{% endif %}{{ messages[0].content }}"
    template = ChatTemplate(source, {"bos_token": "<s>"})
    body = chat(USER, chat_template_kwargs={"flavour": "mint:"})
    assert template.render(body) == "<s>mint:hi"


def test_tojson_keeps_non_ascii_text_as_transformers_does() -> None:
    template = ChatTemplate("{{ messages[0].content | tojson }}", {})
    assert template.render(chat({"role": "user", "content": "你好"})) == '"你好"'


@pytest.mark.parametrize(
    "body",
    [
        chat(USER, tools=[{"type": "function", "function": {"name": "f"}}]),
        chat(USER, chat_template="{{ 'mine' }}"),
        chat({"role": "assistant", "content": "par"}, continue_final_message=True),
        chat({"role": "developer", "content": "x"}),
        chat({"role": "tool", "content": "x", "tool_call_id": "1"}),
        chat({"role": "assistant", "content": None, "tool_calls": []}),
        chat({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}),
        chat(USER, chat_template_kwargs="not an object"),
        {"model": "m", "messages": "not a list"},
    ],
    ids=[
        "tools",
        "own template",
        "continue final",
        "developer role",
        "tool role",
        "tool calls",
        "image part",
        "bad kwargs",
        "bad messages",
    ],
)
def test_what_vllm_renders_differently_is_left_to_the_engine(body: dict[str, Any]) -> None:
    assert not ChatTemplate(PLAIN, {}).renders(body)


def test_a_template_that_walks_content_parts_is_left_to_the_engine() -> None:
    assert not ChatTemplate(WALKS_PARTS, {}).renders(chat(USER))


def test_a_template_that_raises_refuses_the_request() -> None:
    template = ChatTemplate("{{ raise_exception('no system role') }}", {})
    with pytest.raises(jinja2.TemplateError, match="no system role"):
        template.render(chat(USER))


def test_the_sandbox_refuses_what_a_template_must_not_do() -> None:
    template = ChatTemplate("{{ messages.__class__.__mro__ }}", {})
    with pytest.raises(jinja2.exceptions.SecurityError):
        template.render(chat(USER))
