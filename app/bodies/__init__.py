"""Reading each API route's body into one ``Parsed`` (each route's parser
is its entry's in ``app.request.routes``)."""

from app.bodies.base import Parsed, Prompt

__all__ = ["Parsed", "Prompt"]
