"""The body of ``/v1/embeddings``.

An embedding runs its input through the model once and generates nothing:
its KV demand and its charge are its input's tokens alone. Its ``input``
takes the shapes of a completion's ``prompt`` (a string, a list of strings,
token ids, a list of token-id lists), one prompt per entry. vLLM's
chat-style embeddings (``messages`` instead of ``input``) are not served
through the gateway.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from app.bodies.base import Parsed, refused
from app.bodies.completions import prompts_of
from app.request.errors import InvalidRequest


class _EmbeddingBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: StrictStr = Field(min_length=1)
    input: StrictStr | list[StrictStr] | list[StrictInt] | list[list[StrictInt]]


def parse_embedding(body: dict[str, Any]) -> Parsed:
    if "stream" in body and body["stream"] not in (False, None):
        raise InvalidRequest("stream: embeddings are not streamed", param="stream")
    try:
        parsed = _EmbeddingBody.model_validate(body)
    except ValidationError as exc:
        raise refused(exc) from exc
    return Parsed(
        model=parsed.model,
        prompts=prompts_of(parsed.input, "input"),
        max_tokens_param="input",
        generates=False,
    )
