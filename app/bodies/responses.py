"""The body of ``/v1/responses`` (OpenAI's Responses API, as vLLM serves it).

Its prompt is its ``instructions`` and ``input``: a string, or a list of
items. vLLM renders them with the model's chat template, after turning them
into chat messages (``construct_input_messages``): the instructions become a
system message, a string input a user message, each message item a message
(an assistant item keeps the text of its first content part; text parts of
any kind are text parts to its chat parser). The same
messages, given to the engine's chat ``/tokenize``, count the prompt exactly
(``tokenize_body``). What is not plain messages — tools, function calls and
their outputs, reasoning items, images — is rendered by vLLM in ways not
reproduced here: such a prompt is estimated from its text.

A ``background`` response runs in the engine after its call has returned:
neither its KV reservation, nor its charge, nor a client's leaving could
follow it, so the gateway refuses it. ``previous_response_id`` continues a
response one engine holds (``app.request.response_ids``).
"""

from typing import Any, TypeGuard

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

from app.bodies.base import Parsed, Prompt, refused
from app.request.errors import InvalidRequest

# Content parts that are text, as vLLM's chat parser reads them.
_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
_PLAIN_ROLES = frozenset({"system", "developer", "user", "assistant"})


class _ResponsesBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: StrictStr = Field(min_length=1)
    input: StrictStr | list[dict[str, Any]]
    instructions: StrictStr | None = None
    max_output_tokens: StrictInt | None = Field(None, ge=1)
    stream: StrictBool = False
    background: StrictBool | None = None
    previous_response_id: StrictStr | None = Field(None, min_length=1)
    tools: list[Any] | None = None


def parse_responses(body: dict[str, Any]) -> Parsed:
    try:
        parsed = _ResponsesBody.model_validate(body)
    except ValidationError as exc:
        raise refused(exc) from exc
    if parsed.background:
        raise InvalidRequest(
            "background: a background response runs after its call returns, out of the"
            " gateway's sight (its capacity, its charge, its cancellation); send it without"
            " background",
            param="background",
        )
    messages = chat_messages(parsed.instructions, parsed.input)
    tokenize_body = None
    if messages is not None and not parsed.tools:
        tokenize_body = {"messages": messages}
        if isinstance(body.get("chat_template_kwargs"), dict):
            tokenize_body["chat_template_kwargs"] = body["chat_template_kwargs"]
    return Parsed(
        model=parsed.model,
        prompts=(Prompt(text=_text(parsed.instructions, parsed.input)),),
        stream=parsed.stream,
        max_tokens=parsed.max_output_tokens,
        max_tokens_param="max_output_tokens",
        tokenize_body=tokenize_body,
        previous_response_id=parsed.previous_response_id,
    )


def chat_messages(
    instructions: str | None, items: str | list[dict[str, Any]]
) -> list[dict[str, Any]] | None:
    """The chat messages vLLM renders for ``instructions`` and ``items``, or
    None where an item is not a plain message."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
        return messages
    for item in items:
        role = item.get("role")
        if role not in _PLAIN_ROLES or item.get("type", "message") != "message":
            return None
        content = item.get("content")
        if not _plain_content(content):
            return None
        if role != "assistant":
            messages.append({"role": role, "content": _chat_content(content)})
            continue
        # vLLM keeps an assistant item's first part only.
        text = content if isinstance(content, str) else content[0]["text"] if content else None
        if text is None:
            return None
        messages.append({"role": "assistant", "content": text})
    return messages


def _chat_content(content: str | list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """A message's content as a chat request writes it: the Responses API's
    ``input_text`` parts are chat ``text`` parts to vLLM's chat parser (and
    only those pass the chat ``/tokenize``'s validation)."""
    if isinstance(content, str):
        return content
    return [{"type": "text", "text": part["text"]} for part in content]


def _plain_content(content: Any) -> TypeGuard[str | list[dict[str, Any]]]:
    if isinstance(content, str):
        return True
    return isinstance(content, list) and all(
        isinstance(part, dict)
        and part.get("type") in _TEXT_PARTS
        and isinstance(part.get("text"), str)
        for part in content
    )


def _text(instructions: str | None, items: str | list[dict[str, Any]]) -> str:
    """Every text of the prompt (what the estimate measures)."""
    texts = [instructions] if instructions else []
    if isinstance(items, str):
        return "\n".join([*texts, items])
    for item in items:
        for key in ("content", "output", "arguments"):
            value = item.get(key)
            if isinstance(value, str):
                texts.append(value)
            elif isinstance(value, list):
                texts.extend(
                    part["text"]
                    for part in value
                    if isinstance(part, dict) and isinstance(part.get("text"), str)
                )
    return "\n".join(texts)
