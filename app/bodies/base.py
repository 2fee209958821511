"""What a route's body says to the gateway, whatever the route.

Each API route reads its own body (``app.bodies.completions``,
``app.bodies.responses``, ``app.bodies.embeddings``) into one ``Parsed``:
the model, whether it streams, its output bound and its prompts. The checks
every route shares (the model exists, the output fits the context, the batch
size) are ``app.request.validation``'s, on the ``Parsed`` alone.
"""

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from app.request.errors import InvalidRequest


@dataclass(frozen=True)
class Prompt:
    """One prompt of a request: its text, and its token ids once known (given
    as ids by the client, or counted); without ids its tokens are estimated.
    ``encoder``: the positions an encoder's output takes in the engine's
    cache beside the prompt, which the decoder reads through cross-attention
    (an audio window's); they are not part of the decoder's context."""

    text: str = ""
    ids: tuple[int, ...] = ()
    encoder: int = 0

    @property
    def counted(self) -> int:
        """Its exact token count (0: not known, estimate it)."""
        return len(self.ids)


@dataclass(frozen=True)
class Parsed:
    """A route's body, as far as the gateway reads it."""

    model: str
    prompts: tuple[Prompt, ...]
    stream: bool = False
    # The body names ``stream_options`` (only allowed on a stream).
    stream_options: bool = False
    # The client asked for the stream's usage chunk.
    wants_usage: bool = False
    # The most tokens it may generate per sequence, and the field that says so.
    max_tokens: int | None = None
    max_tokens_param: str = "max_tokens"
    n: int = 1
    # Whether the engine generates for it at all (an embedding does not).
    generates: bool = True
    # A chat request whose prompt is this body's, for a route whose body is
    # not a chat request (a Responses input): what the prompt is counted as.
    tokenize_body: dict[str, Any] | None = None
    # A Responses call that continues an earlier response held by one engine.
    previous_response_id: str | None = None


def refused(exc: ValidationError) -> InvalidRequest:
    """The first of pydantic's errors as the gateway's 400, naming the field."""
    first = exc.errors()[0]
    param = _param_of(first["loc"])
    return InvalidRequest(f"{param}: {first['msg']}" if param else first["msg"], param=param)


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
