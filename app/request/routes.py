"""The API routes the gateway admits, one entry each: everything a route
needs said about it, in one place.

The entry point finds a request's route here by its path; the flight calls
the engine's path; validation reads the body with the route's parser and
names its prompt's field in errors; admission's estimate starts from the
route's template cost; the relays read usage by the route's field names and
frame its stream by its kind; the metrics label by its name. Every field
of ``ApiRoute`` is required, and the table must name every ``Route``: a
route added without one of its pieces fails at import, not later through a
default that happened to fit another route.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from app.bodies import Parsed
from app.bodies.audio import parse_audio
from app.bodies.batch_chat import parse_batch_chat
from app.bodies.completions import parse_chat, parse_completion
from app.bodies.embeddings import parse_embedding
from app.bodies.messages import parse_messages
from app.bodies.pooling import parse_classify, parse_pooling
from app.bodies.responses import parse_responses
from app.bodies.scoring import parse_rerank, parse_score
from app.request.errors import ErrorShape

__all__ = ["ROUTES", "ApiRoute", "BodyFormat", "Route", "StreamKind", "UsageNames", "route_at"]

# The admitted routes' names (the metrics' ``route`` label).
Route = Literal[
    "chat",
    "batch_chat",
    "completions",
    "responses",
    "messages",
    "embeddings",
    "transcriptions",
    "translations",
    "pooling",
    "classify",
    "score",
    "rerank",
]
# How a route's stream is framed and how it ends: OpenAI's chunks ended by
# ``data: [DONE]`` (``app.relay.stream``), the Responses API's named events
# ended by ``response.completed``, Anthropic's ended by ``message_stop``
# (``app.relay.named``). None: the route never streams.
StreamKind = Literal["chunks", "responses", "messages"]
# How the gateway counts a prompt's tokens: as a completion's text, as a
# rendered chat, each as one of a batch of chats (the body with that
# conversation's messages), or as the chat its body converts to
# (``Parsed.tokenize_body``; without one, it is estimated), or never: its
# prompt is no text the engine tokenizes alone (an audio request's hint,
# behind the model's own special tokens), so it is estimated.
CountedAs = Literal["text", "chat", "chats", "converted_chat", "never"]
# How its body comes: a JSON object, or a multipart form with a file
# (``app.bodies.forms``), read within ``GATEWAY_MAX_UPLOAD_BYTES``.
BodyFormat = Literal["json", "form"]


@dataclass(frozen=True)
class UsageNames:
    """The fields of an answer's ``usage`` object that count its prompt (the
    sum of those present: Anthropic's counts the prompt's cache reads and
    writes apart from the rest of its input) and its output."""

    prompt: tuple[str, ...]
    output: str


OPENAI_USAGE = UsageNames(("prompt_tokens",), "completion_tokens")


@dataclass(frozen=True)
class ApiRoute:
    name: Route
    # Where clients send it, and where the engine serves it.
    path: str
    engine_path: str
    # Other paths vLLM serves it at: reached there too, and sent on to the
    # engine at the path the client asked for.
    aliases: tuple[str, ...]
    body: BodyFormat
    parse: Callable[[dict[str, Any]], Parsed]
    # The body field a prompt comes in (the ``param`` of errors about it).
    prompt_param: str
    # Tokens a prompt costs before its text (a chat template's), until the
    # estimate has learnt the route's own (``app.admission.estimate``).
    template_tokens: float
    counted_as: CountedAs
    usage: UsageNames
    stream: StreamKind | None
    # Its prompts share the engine's prefix cache only within a cache salt
    # (a route that generates nothing caches nothing worth isolating).
    salted: bool
    # The engine keeps the answer under an id the gateway gives it (a
    # response that a later one may continue).
    stored: bool
    # The shape its clients read errors in (``app.request.error_responses``).
    errors: ErrorShape


def _audio_route(name: Literal["transcriptions", "translations"]) -> ApiRoute:
    """A Whisper route: the two differ only in their path (a translation
    is a transcription whose task is English)."""
    return ApiRoute(
        name=name,
        path=f"/v1/audio/{name}",
        engine_path=f"/v1/audio/{name}",
        aliases=(),
        body="form",
        parse=parse_audio,
        prompt_param="file",
        # Whisper's decoder prompt before the hint: start of transcript,
        # language, task, no timestamps.
        template_tokens=4.0,
        counted_as="never",
        # A streamed answer's usage chunk counts tokens (its prompt the
        # audio's and the decoder's); a whole answer's counts seconds, which
        # say nothing here: it pays its estimate (``app.keys.quota``).
        usage=OPENAI_USAGE,
        stream="chunks",
        salted=False,
        stored=False,
        errors="openai",
    )


_TABLE = (
    ApiRoute(
        name="chat",
        path="/v1/chat/completions",
        engine_path="/v1/chat/completions",
        aliases=(),
        body="json",
        parse=parse_chat,
        prompt_param="messages",
        template_tokens=16.0,
        counted_as="chat",
        usage=OPENAI_USAGE,
        stream="chunks",
        salted=True,
        stored=False,
        errors="openai",
    ),
    ApiRoute(
        name="batch_chat",
        path="/v1/chat/completions/batch",
        engine_path="/v1/chat/completions/batch",
        aliases=(),
        body="json",
        parse=parse_batch_chat,
        prompt_param="messages",
        template_tokens=16.0,
        counted_as="chats",
        usage=OPENAI_USAGE,
        stream=None,
        salted=True,
        stored=False,
        errors="openai",
    ),
    ApiRoute(
        name="completions",
        path="/v1/completions",
        engine_path="/v1/completions",
        aliases=(),
        body="json",
        parse=parse_completion,
        prompt_param="prompt",
        template_tokens=1.0,
        counted_as="text",
        usage=OPENAI_USAGE,
        stream="chunks",
        salted=True,
        stored=False,
        errors="openai",
    ),
    ApiRoute(
        name="responses",
        path="/v1/responses",
        engine_path="/v1/responses",
        aliases=(),
        body="json",
        parse=parse_responses,
        prompt_param="input",
        template_tokens=16.0,
        counted_as="converted_chat",
        usage=UsageNames(("input_tokens",), "output_tokens"),
        stream="responses",
        salted=True,
        stored=True,
        errors="openai",
    ),
    ApiRoute(
        name="messages",
        path="/v1/messages",
        engine_path="/v1/messages",
        aliases=(),
        body="json",
        parse=parse_messages,
        prompt_param="messages",
        template_tokens=16.0,
        counted_as="converted_chat",
        # Anthropic counts the prompt's cache reads and writes apart from
        # the rest of its input: the prompt is their sum.
        usage=UsageNames(
            ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"),
            "output_tokens",
        ),
        stream="messages",
        salted=True,
        stored=False,
        errors="anthropic",
    ),
    _audio_route("transcriptions"),
    _audio_route("translations"),
    ApiRoute(
        name="pooling",
        path="/pooling",
        engine_path="/pooling",
        aliases=(),
        body="json",
        parse=parse_pooling,
        prompt_param="input",
        template_tokens=1.0,
        counted_as="text",
        usage=OPENAI_USAGE,
        stream=None,
        salted=False,
        stored=False,
        errors="openai",
    ),
    ApiRoute(
        name="classify",
        path="/classify",
        engine_path="/classify",
        aliases=(),
        body="json",
        parse=parse_classify,
        prompt_param="input",
        template_tokens=1.0,
        counted_as="text",
        usage=OPENAI_USAGE,
        stream=None,
        salted=False,
        stored=False,
        errors="openai",
    ),
    ApiRoute(
        name="score",
        path="/score",
        engine_path="/score",
        aliases=("/v1/score",),
        body="json",
        parse=parse_score,
        prompt_param="text_2",
        template_tokens=2.0,
        counted_as="text",
        usage=OPENAI_USAGE,
        stream=None,
        salted=False,
        stored=False,
        errors="openai",
    ),
    ApiRoute(
        name="rerank",
        path="/rerank",
        engine_path="/rerank",
        aliases=("/v1/rerank", "/v2/rerank"),
        body="json",
        parse=parse_rerank,
        prompt_param="documents",
        template_tokens=2.0,
        counted_as="text",
        usage=OPENAI_USAGE,
        stream=None,
        salted=False,
        stored=False,
        errors="openai",
    ),
    ApiRoute(
        name="embeddings",
        path="/v1/embeddings",
        engine_path="/v1/embeddings",
        aliases=(),
        body="json",
        parse=parse_embedding,
        prompt_param="input",
        template_tokens=1.0,
        counted_as="text",
        usage=OPENAI_USAGE,
        stream=None,
        salted=False,
        stored=False,
        errors="openai",
    ),
)


def indexed(table: tuple[ApiRoute, ...]) -> tuple[Mapping[Route, ApiRoute], Mapping[str, ApiRoute]]:
    """The table by route and by path; a ``ValueError`` unless it names
    every route once, each at a path of its own."""
    by_name = {route.name: route for route in table}
    by_path = {path: route for route in table for path in (route.path, *route.aliases)}
    missing = sorted(set(get_args(Route)) - set(by_name))
    if missing:
        raise ValueError(f"the route table has no entry for {', '.join(missing)}")
    paths = sum(1 + len(route.aliases) for route in table)
    if len(by_name) != len(table) or len(by_path) != paths:
        raise ValueError("the route table names a route, or a path, twice")
    return by_name, by_path


ROUTES, _BY_PATH = indexed(_TABLE)


def route_at(path: str) -> ApiRoute | None:
    """The admitted route clients reach at ``path``, if any."""
    return _BY_PATH.get(path)
