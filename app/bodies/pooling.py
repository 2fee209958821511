"""The bodies of vLLM's ``/pooling`` (the model's pooled output — its hidden
states, as the engine's pooling task says — for each input) and
``/classify`` (a classifier's labels and their probabilities for each input).

Like an embedding, it runs its input through the model once and generates
nothing: its KV demand and its charge are its input's tokens alone, and its
``input`` takes the shapes of an embedding's. vLLM's chat-style pooling
(``messages`` instead of ``input``) is not served through the gateway, as
chat-style embeddings are not.
"""

from typing import Any

from app.bodies.base import Parsed
from app.bodies.embeddings import parse_embedding
from app.request.errors import InvalidRequest


def parse_pooling(body: dict[str, Any]) -> Parsed:
    return _inputs(body, "pooling")


def parse_classify(body: dict[str, Any]) -> Parsed:
    return _inputs(body, "classification")


def _inputs(body: dict[str, Any], what: str) -> Parsed:
    if "messages" in body and "input" not in body:
        raise InvalidRequest(
            f"messages: chat-style {what} is not served through the gateway; send `input`",
            param="messages",
        )
    return parse_embedding(body)
