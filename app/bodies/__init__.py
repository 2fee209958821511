"""Reading each API route's body: ``parse(route, body)``."""

from collections.abc import Callable
from typing import Any

from app.bodies.base import Parsed, Prompt, Route
from app.bodies.completions import parse_chat, parse_completion
from app.bodies.embeddings import parse_embedding
from app.bodies.responses import parse_responses

__all__ = ["Parsed", "Prompt", "Route", "parse"]

_PARSERS: dict[Route, Callable[[dict[str, Any]], Parsed]] = {
    "chat": parse_chat,
    "completions": parse_completion,
    "responses": parse_responses,
    "embeddings": parse_embedding,
}


def parse(route: Route, body: dict[str, Any]) -> Parsed:
    """What ``body`` says, read as ``route``'s, or ``InvalidRequest``."""
    return _PARSERS[route](body)
