"""The bodies of vLLM's score (``/score``, ``/v1/score``) and rerank
(``/rerank``, ``/v1/rerank``, ``/v2/rerank``) routes.

Both compare texts, and generate nothing. Score takes two sides under any of
vLLM's names (``text_1``/``text_2``, ``queries``/``documents``,
``queries``/``items``, ``data_1``/``data_2``), each a text or a list: one
against N, or N against N; rerank takes one ``query`` and its
``documents``. How the engine reads them depends on its model: a
cross-encoder (a classifier with one label) runs each pair as one sequence,
a bi-encoder (an embedding model, by cosine similarity) each text once. The
gateway cannot tell which from the body, so each pair is one prompt, the
query and the document together: a cross-encoder's demand, and at least a
bi-encoder's (which reads the query once). The engine's ``usage`` settles
what the key pays. A text that is not a string (vLLM's multimodal parts) is
estimated from its JSON's length.
"""

import json
from typing import Any

from app.bodies.base import Parsed, Prompt
from app.request.errors import InvalidRequest

# The names of a score request's two sides, in the order vLLM tries them.
SCORE_SIDES = (
    ("text_1", "text_2"),
    ("queries", "documents"),
    ("queries", "items"),
    ("data_1", "data_2"),
)


def parse_score(body: dict[str, Any]) -> Parsed:
    model = _model(body)
    for first, second in SCORE_SIDES:
        if first in body and second in body:
            return _pairs(model, _side(body, first), _side(body, second), first, second)
    names = ", ".join(f"{a}/{b}" for a, b in SCORE_SIDES)
    raise InvalidRequest(f"the texts to score: send one of {names}", param="text_1")


def parse_rerank(body: dict[str, Any]) -> Parsed:
    model = _model(body)
    if "query" not in body or isinstance(body["query"], list):
        raise InvalidRequest("query: one text to rank the documents by", param="query")
    return _pairs(model, [body["query"]], _side(body, "documents"), "query", "documents")


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("model: a model's name is required", param="model")
    return model


def _side(body: dict[str, Any], name: str) -> list[Any]:
    value = body.get(name)
    items = value if isinstance(value, list) else [value]
    if not items or any(item is None or item == "" for item in items):
        raise InvalidRequest(f"{name}: at least one text, none empty", param=name)
    return items


def _pairs(model: str, first: list[Any], second: list[Any], name_1: str, name_2: str) -> Parsed:
    if len(first) > 1 and len(first) != len(second):
        raise InvalidRequest(
            f"{name_2}: as many as {name_1} ({len(first)}), or one {name_1} against many",
            param=name_2,
        )
    queries = first * len(second) if len(first) == 1 else first
    prompts = tuple(
        Prompt(text=f"{_text(query)}\n{_text(document)}")
        for query, document in zip(queries, second, strict=True)
    )
    return Parsed(model=model, prompts=prompts, max_tokens_param=name_2, generates=False)


def _text(item: Any) -> str:
    return item if isinstance(item, str) else json.dumps(item)
