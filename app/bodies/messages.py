"""The body of ``/v1/messages`` (Anthropic's Messages API, as vLLM serves it).

``max_tokens`` is required, as Anthropic's API requires it (vLLM's own
answer to a body without it is an OpenAI-shaped 400; the gateway's is
Anthropic's). Its prompt is its ``system`` and ``messages``: vLLM turns them
into a chat request (``AnthropicServingMessages.to_chat_completion_request``)
and renders that with the model's chat template. The same chat messages,
given to the engine's chat ``/tokenize``, count the prompt (``tokenize_body``)
where every block is text; tools, images, tool uses and their results, and
thinking blocks are rendered by vLLM in ways not reproduced here: such a
prompt is estimated from its text.
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

from app.bodies.base import Parsed, Prompt, refused

_BILLING_HEADER = "x-anthropic-billing-header"


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["user", "assistant", "system"]
    content: StrictStr | list[dict[str, Any]]


class _MessagesBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: StrictStr = Field(min_length=1)
    messages: list[_Message] = Field(min_length=1)
    max_tokens: StrictInt = Field(ge=1)
    stream: StrictBool | None = False
    system: StrictStr | list[dict[str, Any]] | None = None
    tools: list[Any] | None = None


def parse_messages(body: dict[str, Any]) -> Parsed:
    try:
        parsed = _MessagesBody.model_validate(body)
    except ValidationError as exc:
        raise refused(exc) from exc
    messages = None if parsed.tools else chat_messages(parsed.system, parsed.messages)
    tokenize_body = None
    if messages is not None:
        tokenize_body = {"messages": messages}
        if isinstance(body.get("chat_template_kwargs"), dict):
            tokenize_body["chat_template_kwargs"] = body["chat_template_kwargs"]
    return Parsed(
        model=parsed.model,
        prompts=(Prompt(text=_text(parsed.system, parsed.messages)),),
        stream=bool(parsed.stream),
        max_tokens=parsed.max_tokens,
        tokenize_body=tokenize_body,
    )


def chat_messages(
    system: str | list[dict[str, Any]] | None, messages: list[_Message]
) -> list[dict[str, Any]] | None:
    """The chat messages vLLM renders for ``system`` and ``messages``, or
    None where a block is not text, or where vLLM's rendering depends on the
    model's template (a system message among the messages)."""
    chat: list[dict[str, Any]] = []
    if system:
        parts = _texts(system)
        if parts is None:
            return None
        # vLLM drops Claude Code's per-request attribution header.
        kept = [part for part in parts if part and not part.startswith(_BILLING_HEADER)]
        if kept:
            chat.append({"role": "system", "content": "".join(kept)})
    for message in messages:
        if message.role == "system":
            return None
        if isinstance(message.content, str):
            chat.append({"role": message.role, "content": message.content})
            continue
        texts = _texts(message.content)
        if texts is None:
            return None
        # vLLM skips an empty text block.
        texts = [text for text in texts if text]
        if len(texts) == 1:
            chat.append({"role": message.role, "content": texts[0]})
        elif texts:
            blocks = [{"type": "text", "text": text} for text in texts]
            chat.append({"role": message.role, "content": blocks})
        elif message.role != "user":
            chat.append({"role": message.role})
    return chat


def _texts(content: str | list[dict[str, Any]]) -> list[str] | None:
    """The texts of a content that is only text, else None."""
    if isinstance(content, str):
        return [content]
    texts = []
    for block in content:
        if not isinstance(block, dict) or block.get("type") != "text":
            return None
        text = block.get("text")
        if not isinstance(text, str):
            return None
        texts.append(text)
    return texts


def _text(system: str | list[dict[str, Any]] | None, messages: list[_Message]) -> str:
    """Every text of the prompt (what the estimate measures)."""
    texts: list[str] = []
    for content in (system, *(message.content for message in messages)):
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(
                str(block[key])
                for block in content
                if isinstance(block, dict)
                for key in ("text", "thinking", "content")
                if isinstance(block.get(key), str)
            )
    return "\n".join(texts)
