"""Reading and checking a completion request before it goes anywhere.

The gateway checks what it needs to route and admit a request (model, stream,
output bounds, ``n``, the shape of messages or prompt) and leaves every other
field to the engine, which validates its own sampling parameters.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError
from starlette.requests import Request

from app.errors import BodyTooLarge, InvalidRequest, ModelNotFound

Route = Literal["chat", "completions"]


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


class _ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: StrictStr = Field(min_length=1)
    content: StrictStr | list[dict[str, Any]] | None = None


class _ChatBody(_Common):
    messages: list[_ChatMessage] = Field(min_length=1)
    max_completion_tokens: StrictInt | None = Field(None, ge=1)


class _CompletionBody(_Common):
    prompt: StrictStr | list[StrictStr] | list[StrictInt] | list[list[StrictInt]]


@dataclass(frozen=True)
class CompletionJob:
    """A checked request: what admission and the relay need to know about it."""

    route: Route
    body: dict[str, Any]
    model: str
    stream: bool
    max_tokens: int | None
    n: int
    wants_usage: bool
    prompt_text: str
    prompt_token_ids: int
    max_model_len: int | None

    def upstream_body(self) -> bytes:
        """The body sent to the engine: the client's, plus a request for the
        usage chunk on streams (the gateway counts tokens from it and drops it
        again if the client did not ask for it)."""
        body = self.body
        if self.stream and not self.wants_usage:
            options = dict(body.get("stream_options") or {})
            options["include_usage"] = True
            body = {**body, "stream_options": options}
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


async def read_json_body(request: Request, limit: int) -> dict[str, Any]:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"request body is larger than {limit} bytes")
    # Count bytes as they arrive: Content-Length may be absent or wrong.
    parts: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise BodyTooLarge(f"request body is larger than {limit} bytes")
        parts.append(part)
    raw = b"".join(parts)
    if not raw.strip():
        raise InvalidRequest("the request body is empty; send a JSON object")
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise InvalidRequest(f"the request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    return body


def check_request(
    route: Route, body: dict[str, Any], models: Mapping[str, int | None], max_n: int
) -> CompletionJob:
    """Validate ``body`` against the route and the engine's models (name to
    ``max_model_len``)."""
    try:
        parsed: _Common = (_ChatBody if route == "chat" else _CompletionBody).model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = _param_of(first["loc"])
        raise InvalidRequest(
            f"{param}: {first['msg']}" if param else first["msg"], param=param
        ) from exc

    if parsed.model not in models:
        known = ", ".join(sorted(models)) or "none"
        raise ModelNotFound(
            f"the model `{parsed.model}` does not exist; available: {known}", param="model"
        )
    if parsed.n > max_n:
        raise InvalidRequest(f"n: must be at most {max_n}", param="n")
    if parsed.stream_options is not None and not parsed.stream:
        raise InvalidRequest(
            "stream_options: only allowed when stream is true", param="stream_options"
        )

    max_tokens = parsed.max_tokens
    param = "max_tokens"
    if isinstance(parsed, _ChatBody) and parsed.max_completion_tokens is not None:
        max_tokens, param = parsed.max_completion_tokens, "max_completion_tokens"
    max_model_len = models[parsed.model]
    if max_tokens is not None and max_model_len is not None and max_tokens > max_model_len:
        raise InvalidRequest(
            f"{param}: {max_tokens} is more than the model's context length ({max_model_len})",
            param=param,
        )

    text, token_ids = _prompt_of(parsed)
    wants_usage = bool(parsed.stream_options and parsed.stream_options.include_usage)
    return CompletionJob(
        route=route,
        body=body,
        model=parsed.model,
        stream=parsed.stream,
        max_tokens=max_tokens,
        n=parsed.n,
        wants_usage=wants_usage,
        prompt_text=text,
        prompt_token_ids=token_ids,
        max_model_len=max_model_len,
    )


_UNION_TAGS = {"str", "int", "bool", "float", "dict", "list", "none"}


def _param_of(loc: tuple[int | str, ...]) -> str | None:
    """The field path of a validation error, without pydantic's union-branch
    tags (``prompt.str``, ``prompt.list[int]``)."""
    parts: list[str] = []
    for part in loc:
        if isinstance(part, str) and (part in _UNION_TAGS or "[" in part):
            break
        parts.append(str(part))
    return ".".join(parts) or None


def _prompt_of(parsed: _Common) -> tuple[str, int]:
    """The prompt as text (for estimating its tokens) and the number of
    tokens given directly as ids."""
    if isinstance(parsed, _ChatBody):
        texts: list[str] = []
        for message in parsed.messages:
            if isinstance(message.content, str):
                texts.append(message.content)
            elif message.content:
                texts.extend(
                    str(part.get("text", "")) for part in message.content if isinstance(part, dict)
                )
        return "\n".join(texts), 0
    assert isinstance(parsed, _CompletionBody)
    prompt = parsed.prompt
    if not prompt:
        raise InvalidRequest("prompt: must not be empty", param="prompt")
    if isinstance(prompt, str):
        return prompt, 0
    if all(isinstance(item, str) for item in prompt):
        return "\n".join(str(item) for item in prompt), 0
    if all(isinstance(item, int) for item in prompt):
        return "", len(prompt)
    return "", sum(len(item) for item in prompt if isinstance(item, list))
