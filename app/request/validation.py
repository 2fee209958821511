"""Reading and checking an API request before it goes anywhere.

Each route reads its own body (``app.bodies``); what every route shares is
checked here: the model exists, ``n`` and the batch are within the limits,
the output bound fits the model's context. What is certain from the request
alone is refused here: prompts given as token ids that cannot fit the
model's context, batches larger than allowed, text the engine could not
encode. What needs an estimate (text prompts against the context and the KV
cache) is admission's to refuse. Every other field is the engine's to
validate (but for the fields that are the gateway's: ``app.request.owned_fields``).
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.requests import ClientDisconnect, Request

from app.bodies import Parsed, Prompt
from app.bodies.forms import encode_form, read_form
from app.request.errors import (
    BodyTimeout,
    BodyTooLarge,
    ClientDisconnected,
    InvalidRequest,
    ModelNotFound,
    TooLong,
    UnsupportedMediaType,
)
from app.request.owned_fields import CacheScope, owned_body
from app.request.routes import ROUTES, Route

__all__ = [
    "CompletionJob",
    "Limits",
    "Prompt",
    "Route",
    "check_request",
    "read_body",
    "read_json_body",
]


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
    # Whether the engine generates for it (an embedding does not).
    generates: bool = True
    # The engine's stream chunks carry usage (continuous usage stats), and
    # whether the client asked for that itself (else the relay strips it).
    chunk_usage: bool = False
    forward_chunk_usage: bool = False
    # A chat request counting its prompt, for a body that is not one.
    tokenize_body: dict[str, Any] | None = None
    # The id the engine gives the response (the Responses API), and the
    # earlier response it continues.
    response_id: str | None = None
    previous_response_id: str | None = None
    # Tokens the engine puts before the prompt (a continued response's
    # earlier turns), counted on top of it.
    history_tokens: int = 0
    # The media type of ``upstream_body`` (a form's names its boundary).
    upstream_type: str = "application/json"

    @property
    def sequences(self) -> int:
        """Sequences the engine runs for this request: one per prompt of a
        batch, times ``n``."""
        return len(self.prompts) * self.n


async def read_body(request: Request, route: Route, limit: int, timeout: float) -> dict[str, Any]:
    """The request's body as its route takes it (a JSON object, or a form's
    fields), read within ``timeout`` seconds and ``limit`` bytes."""
    if ROUTES[route].body == "form":
        content_type = request.headers.get("content-type") or ""
        if _media(content_type) != "multipart/form-data":
            shown = _media(content_type) or "none"
            raise UnsupportedMediaType(
                f"Content-Type {shown!r} is not a form; send multipart/form-data"
            )
        raw = await _read_bounded(request, limit, timeout)
        if not raw.strip():
            raise InvalidRequest("the request body is empty; send a multipart form")
        return await read_form(raw, content_type)
    return await read_json_body(request, limit, timeout)


async def read_json_body(request: Request, limit: int, timeout: float) -> dict[str, Any]:
    """The request's JSON object, read within ``timeout`` seconds and
    ``limit`` bytes."""
    content_type = request.headers.get("content-type")
    if content_type is not None and not _is_json(content_type):
        raise UnsupportedMediaType(
            f"Content-Type {content_type.split(';')[0]!r} is not JSON; send application/json"
        )
    raw = await _read_bounded(request, limit, timeout)
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


async def _read_bounded(request: Request, limit: int, timeout: float) -> bytes:
    """The body's bytes, within ``timeout`` seconds and ``limit`` bytes
    (counted as they arrive: Content-Length may lie)."""
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
    return b"".join(parts)


def _media(content_type: str) -> str:
    return content_type.split(";")[0].strip().lower()


def _is_json(content_type: str) -> bool:
    media = _media(content_type)
    return media == "application/json" or media.endswith("+json")


def check_request(
    route: Route,
    body: dict[str, Any],
    models: Mapping[str, int | None],
    limits: Limits,
    http_version: str = "1.1",
    cache_scope: CacheScope | None = None,
    *,
    exact_usage: bool = False,
    request_id: str | None = None,
) -> CompletionJob:
    """Validate ``body`` against the route and the engines' models (name to
    ``max_model_len``); ``cache_scope`` is whose prefix cache it may share,
    when the gateway decides it. ``exact_usage``: a stream whose every chunk
    must say what it has used so far (its tokens are charged to a key).
    ``request_id``: the gateway's id of the request (a response's id)."""
    api = ROUTES[route]
    parsed = api.parse(body)
    if parsed.model not in models:
        known = ", ".join(sorted(models)) or "none"
        raise ModelNotFound(
            f"the model `{parsed.model}` does not exist; available: {known}", param="model"
        )
    if parsed.n > limits.max_n:
        raise InvalidRequest(f"n: must be at most {limits.max_n}", param="n")
    if parsed.stream_options and not parsed.stream:
        raise InvalidRequest(
            "stream_options: only allowed when stream is true", param="stream_options"
        )
    if parsed.stream and http_version == "1.0":
        # A stream's length is unknown up front and HTTP/1.0 has no chunked
        # transfer encoding to carry it.
        raise InvalidRequest("stream: streaming needs HTTP/1.1 or later", param="stream")

    max_tokens, param = parsed.max_tokens, parsed.max_tokens_param
    max_model_len = models[parsed.model]
    if max_tokens is not None and max_model_len is not None and max_tokens > max_model_len:
        raise InvalidRequest(
            f"{param}: {max_tokens} is more than the model's context length ({max_model_len})",
            param=param,
        )

    prompts = parsed.prompts
    if len(prompts) > limits.max_batch:
        field = api.prompt_param
        raise InvalidRequest(
            f"{field}: a batch of {len(prompts)} prompts; at most {limits.max_batch}",
            param=field,
        )
    if max_model_len is not None:
        _check_token_ids_fit(prompts, max_tokens, max_model_len, parsed.generates)
    response_id = f"resp_{request_id}" if api.stored and request_id else None
    upstream, salt = owned_body(body, cache_scope, salted=api.salted, request_id=response_id)
    # A stream of OpenAI's chunks can carry usage: the final chunk's, each chunk's.
    chunked = parsed.stream and api.stream == "chunks"
    form = api.body == "form"
    forward_chunk_usage = chunked and parsed.wants_usage and _continuous(body, form)
    if chunked:
        upstream = (_form_with_usage if form else _with_usage)(upstream, parsed, exact_usage)
    encoded, media_type = encode_form(upstream) if form else (_encode(upstream), "application/json")
    return CompletionJob(
        route=route,
        model=parsed.model,
        stream=parsed.stream,
        max_tokens=max_tokens,
        n=parsed.n,
        wants_usage=parsed.wants_usage,
        prompts=prompts,
        max_model_len=max_model_len,
        upstream_body=encoded,
        upstream_type=media_type,
        cache_salt=salt,
        generates=parsed.generates,
        chunk_usage=forward_chunk_usage or (chunked and exact_usage),
        forward_chunk_usage=forward_chunk_usage,
        tokenize_body=parsed.tokenize_body,
        response_id=response_id,
        previous_response_id=parsed.previous_response_id,
    )


def _check_token_ids_fit(
    prompts: tuple[Prompt, ...], max_tokens: int | None, limit: int, generates: bool
) -> None:
    longest = max(prompt.counted for prompt in prompts)
    if longest + generates > limit:
        raise TooLong(
            f"prompt: {longest} tokens; the model's context is {limit} tokens"
            + (" (prompt plus at least one generated token)" if generates else ""),
            param="prompt",
        )
    if max_tokens is not None and longest + max_tokens > limit:
        raise TooLong(
            f"prompt: {longest} tokens plus max_tokens {max_tokens} exceed the model's"
            f" context of {limit} tokens",
            param="max_tokens",
        )


def _continuous(body: dict[str, Any], form: bool) -> bool:
    if form:
        return _form_true(body.get("stream_continuous_usage_stats"))
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("continuous_usage_stats") is True


# A form's true, as vLLM reads its boolean fields (pydantic's lax booleans).
_FORM_TRUE = frozenset({"true", "1", "on", "yes", "t", "y"})


def _form_true(value: object) -> bool:
    return isinstance(value, str) and value.strip().lower() in _FORM_TRUE


def _with_usage(body: dict[str, Any], parsed: Parsed, exact: bool) -> dict[str, Any]:
    """A chunked stream asks the engine for its usage: in the last chunk
    (the gateway counts tokens from it, and drops it again if the client did
    not ask for it), and in every chunk when ``exact`` (a stream cut short
    is then charged what the engine says it generated; the relay strips the
    per-chunk usage again where the client did not ask for it)."""
    if parsed.wants_usage and not exact:
        return body
    options = dict(body.get("stream_options") or {})
    if not parsed.wants_usage:
        options["include_usage"] = True
        # Usage in the last chunk only, unless ``exact``: with continuous
        # stats the engine would put it in every chunk, which the client
        # did not ask for.
        options["continuous_usage_stats"] = False
    if exact:
        options["continuous_usage_stats"] = True
    return {**body, "stream_options": options}


def _form_with_usage(fields: dict[str, Any], parsed: Parsed, exact: bool) -> dict[str, Any]:
    """``_with_usage`` for a form's stream, whose fields name it at the top
    level (vLLM's ``stream_include_usage``, ``stream_continuous_usage_stats``)."""
    if parsed.wants_usage and not exact:
        return fields
    fields = {**fields, "stream_include_usage": "true"}
    if exact:
        fields["stream_continuous_usage_stats"] = "true"
    elif not parsed.wants_usage:
        fields["stream_continuous_usage_stats"] = "false"
    return fields


def _encode(body: dict[str, Any]) -> bytes:
    """The body sent to the engine, encoded once."""
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
