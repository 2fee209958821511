"""Reading and checking a completion request before it goes anywhere.

The gateway checks what it needs to route and admit a request (model, stream,
output bounds, ``n``, the shape and size of messages or prompts) and leaves
every other field to the engine, which validates its own sampling
parameters (but for the fields that are the gateway's: ``app.owned_fields``).
What is certain from the request alone is refused here: prompts given as
token ids that cannot fit the model's context, batches larger than allowed,
text the engine could not encode. What needs an estimate (text
prompts against the context and the KV cache) is admission's to refuse.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import anyio
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError
from starlette.requests import ClientDisconnect, Request

from app.errors import (
    BodyTimeout,
    BodyTooLarge,
    ClientDisconnected,
    InvalidRequest,
    ModelNotFound,
    TooLong,
    UnsupportedMediaType,
)
from app.owned_fields import CacheScope, owned_body

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
class Prompt:
    """One prompt of a request: its text, and its token ids once known (given
    as ids by the client, or counted); without ids its tokens are estimated."""

    text: str = ""
    ids: tuple[int, ...] = ()

    @property
    def counted(self) -> int:
        """Its exact token count (0: not known, estimate it)."""
        return len(self.ids)


@dataclass(frozen=True)
class Limits:
    """What validation enforces, from the settings."""

    max_n: int
    max_batch: int


@dataclass(frozen=True)
class CompletionJob:
    """A checked request: what admission and the relay need to know about it."""

    route: Route
    model: str
    stream: bool
    max_tokens: int | None
    n: int
    wants_usage: bool
    prompts: tuple[Prompt, ...]
    max_model_len: int | None
    # The bytes sent to the engine, encoded once, before admission.
    upstream_body: bytes
    # The prefix-cache salt in them: prompts share cached blocks only
    # between requests of one salt.
    cache_salt: str | None = None

    @property
    def sequences(self) -> int:
        """Sequences the engine runs for this request: one per prompt of a
        batch, times ``n``."""
        return len(self.prompts) * self.n


async def read_json_body(request: Request, limit: int, timeout: float) -> dict[str, Any]:
    """The request's JSON object, read within ``timeout`` seconds and
    ``limit`` bytes (counted as they arrive: Content-Length may lie)."""
    content_type = request.headers.get("content-type")
    if content_type is not None and not _is_json(content_type):
        raise UnsupportedMediaType(
            f"Content-Type {content_type.split(';')[0]!r} is not JSON; send application/json"
        )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"request body is larger than {limit} bytes")
    parts: list[bytes] = []
    size = 0
    try:
        with anyio.fail_after(timeout):
            async for part in request.stream():
                size += len(part)
                if size > limit:
                    raise BodyTooLarge(f"request body is larger than {limit} bytes")
                parts.append(part)
    except ClientDisconnect:
        raise ClientDisconnected from None
    except TimeoutError:
        raise BodyTimeout(f"the request body was not received within {timeout:g}s") from None
    raw = b"".join(parts)
    if not raw.strip():
        raise InvalidRequest("the request body is empty; send a JSON object")
    try:
        body = json.loads(raw)
    except RecursionError:
        raise InvalidRequest("the request body is nested too deeply") from None
    except ValueError as exc:
        raise InvalidRequest(f"the request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    return body


def _is_json(content_type: str) -> bool:
    media = content_type.split(";")[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def check_request(
    route: Route,
    body: dict[str, Any],
    models: Mapping[str, int | None],
    limits: Limits,
    http_version: str = "1.1",
    cache_scope: CacheScope | None = None,
) -> CompletionJob:
    """Validate ``body`` against the route and the engines' models (name to
    ``max_model_len``); ``cache_scope`` is whose prefix cache it may share,
    when the gateway decides it."""
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
    if parsed.n > limits.max_n:
        raise InvalidRequest(f"n: must be at most {limits.max_n}", param="n")
    if parsed.stream_options is not None and not parsed.stream:
        raise InvalidRequest(
            "stream_options: only allowed when stream is true", param="stream_options"
        )
    if parsed.stream and http_version == "1.0":
        # A stream's length is unknown up front and HTTP/1.0 has no chunked
        # transfer encoding to carry it.
        raise InvalidRequest("stream: streaming needs HTTP/1.1 or later", param="stream")

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

    prompts = _prompts_of(parsed)
    if len(prompts) > limits.max_batch:
        raise InvalidRequest(
            f"prompt: a batch of {len(prompts)} prompts; at most {limits.max_batch}",
            param="prompt",
        )
    if max_model_len is not None:
        _check_token_ids_fit(prompts, max_tokens, max_model_len)
    wants_usage = bool(parsed.stream_options and parsed.stream_options.include_usage)
    upstream, salt = owned_body(body, cache_scope)
    return CompletionJob(
        route=route,
        model=parsed.model,
        stream=parsed.stream,
        max_tokens=max_tokens,
        n=parsed.n,
        wants_usage=wants_usage,
        prompts=prompts,
        max_model_len=max_model_len,
        upstream_body=_encode_upstream(upstream, parsed.stream and not wants_usage),
        cache_salt=salt,
    )


def _check_token_ids_fit(prompts: tuple[Prompt, ...], max_tokens: int | None, limit: int) -> None:
    longest = max(prompt.counted for prompt in prompts)
    if longest + 1 > limit:
        raise TooLong(
            f"prompt: {longest} tokens; the model's context is {limit} tokens"
            " (prompt plus at least one generated token)",
            param="prompt",
        )
    if max_tokens is not None and longest + max_tokens > limit:
        raise TooLong(
            f"prompt: {longest} tokens plus max_tokens {max_tokens} exceed the model's"
            f" context of {limit} tokens",
            param="max_tokens",
        )


def _encode_upstream(body: dict[str, Any], add_usage: bool) -> bytes:
    """The body sent to the engine: the client's (its owned fields applied),
    plus a request for the usage chunk on streams (the gateway counts tokens
    from it and drops it again if the client did not ask for it)."""
    if add_usage:
        options = dict(body.get("stream_options") or {})
        options["include_usage"] = True
        # Usage in the last chunk only: with continuous stats the engine
        # would put it in every chunk, which the client did not ask for.
        options["continuous_usage_stats"] = False
        body = {**body, "stream_options": options}
    try:
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError:
        # JSON's \ud800 escapes decode to lone surrogates, which no engine
        # can tokenize.
        raise InvalidRequest(
            "the request contains a lone UTF-16 surrogate (\\ud800-\\udfff), which is not text"
        ) from None
    except RecursionError:
        raise InvalidRequest("the request body is nested too deeply") from None


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


def _prompts_of(parsed: _Common) -> tuple[Prompt, ...]:
    """The request's prompts: one for a chat, one per batch entry for a
    completion whose ``prompt`` is a list of strings or of token-id lists."""
    if isinstance(parsed, _ChatBody):
        texts: list[str] = []
        for message in parsed.messages:
            if isinstance(message.content, str):
                texts.append(message.content)
            elif message.content:
                texts.extend(
                    str(part.get("text", "")) for part in message.content if isinstance(part, dict)
                )
        return (Prompt(text="\n".join(texts)),)
    assert isinstance(parsed, _CompletionBody)
    prompt = parsed.prompt
    if not prompt:
        raise InvalidRequest("prompt: must not be empty", param="prompt")
    if isinstance(prompt, str):
        return (Prompt(text=prompt),)
    if all(isinstance(item, str) for item in prompt):
        return tuple(Prompt(text=str(item)) for item in prompt)
    if all(isinstance(item, int) for item in prompt):
        return (Prompt(ids=tuple(i for i in prompt if isinstance(i, int))),)
    batch = tuple(Prompt(ids=tuple(item)) for item in prompt if isinstance(item, list))
    if any(not p.ids for p in batch):
        raise InvalidRequest("prompt: a prompt of the batch is empty", param="prompt")
    return batch
