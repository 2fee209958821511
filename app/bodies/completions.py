"""The bodies of ``/v1/chat/completions`` and ``/v1/completions``.

The gateway reads what it needs to route and admit a request (model, stream,
output bound, ``n``, the messages or prompts) and leaves every other field
to the engine, which validates its own sampling parameters.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

from app.bodies.base import Parsed, Prompt, refused
from app.request.errors import InvalidRequest


class _StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")
    include_usage: StrictBool | None = None


class _Common(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: StrictStr = Field(min_length=1)
    stream: StrictBool = False
    stream_options: _StreamOptions | None = None
    max_tokens: StrictInt | None = Field(None, ge=1)
    n: StrictInt = Field(1, ge=1)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: StrictStr = Field(min_length=1)
    content: StrictStr | list[dict[str, Any]] | None = None


class _ChatBody(_Common):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: StrictInt | None = Field(None, ge=1)


class _CompletionBody(_Common):
    prompt: StrictStr | list[StrictStr] | list[StrictInt] | list[list[StrictInt]]


def parse_chat(body: dict[str, Any]) -> Parsed:
    try:
        parsed = _ChatBody.model_validate(body)
    except ValidationError as exc:
        raise refused(exc) from exc
    max_tokens, param = parsed.max_tokens, "max_tokens"
    if parsed.max_completion_tokens is not None:
        max_tokens, param = parsed.max_completion_tokens, "max_completion_tokens"
    return _parsed(parsed, (Prompt(text=chat_text(parsed.messages)),), max_tokens, param)


def parse_completion(body: dict[str, Any]) -> Parsed:
    try:
        parsed = _CompletionBody.model_validate(body)
    except ValidationError as exc:
        raise refused(exc) from exc
    prompts = prompts_of(parsed.prompt, "prompt")
    return _parsed(parsed, prompts, parsed.max_tokens, "max_tokens")


def _parsed(
    parsed: _Common, prompts: tuple[Prompt, ...], max_tokens: int | None, param: str
) -> Parsed:
    options = parsed.stream_options
    return Parsed(
        model=parsed.model,
        prompts=prompts,
        stream=parsed.stream,
        stream_options=options is not None,
        wants_usage=bool(options and options.include_usage),
        max_tokens=max_tokens,
        max_tokens_param=param,
        n=parsed.n,
    )


def chat_text(messages: list[ChatMessage]) -> str:
    """The text of a conversation's messages (what the estimate measures)."""
    texts: list[str] = []
    for message in messages:
        if isinstance(message.content, str):
            texts.append(message.content)
        elif message.content:
            texts.extend(
                str(part.get("text", "")) for part in message.content if isinstance(part, dict)
            )
    return "\n".join(texts)


def prompts_of(
    prompt: str | list[str] | list[int] | list[list[int]], param: str
) -> tuple[Prompt, ...]:
    """One prompt for a string or a list of token ids; one per entry of a
    batch of strings or of token-id lists (``param``: the field they came in)."""
    if not prompt:
        raise InvalidRequest(f"{param}: must not be empty", param=param)
    if isinstance(prompt, str):
        return (Prompt(text=prompt),)
    if all(isinstance(item, str) for item in prompt):
        return tuple(Prompt(text=str(item)) for item in prompt)
    if all(isinstance(item, int) for item in prompt):
        return (Prompt(ids=tuple(i for i in prompt if isinstance(i, int))),)
    batch = tuple(Prompt(ids=tuple(item)) for item in prompt if isinstance(item, list))
    if any(not p.ids for p in batch):
        raise InvalidRequest(f"{param}: a prompt of the batch is empty", param=param)
    return batch
