"""The body of ``/v1/chat/completions/batch``: several conversations in one
non-streaming request (vLLM's batch chat).

``messages`` is a list of conversations, each a list of chat messages; the
engine runs one sequence per conversation and answers one choice each. The
request's KV demand and its key's charge are the sum over its
conversations, each counted as the chat the engine renders (the request's
other fields with that conversation's messages); their number is held to
``GATEWAY_MAX_BATCH`` like a completion's batch of prompts. What vLLM's
batch chat does not do is refused here with a 400, as vLLM refuses it:
``stream``, ``tools``, ``n`` other than 1.
"""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, ValidationError

from app.bodies.base import Parsed, Prompt, refused
from app.bodies.completions import ChatMessage, chat_text
from app.request.errors import InvalidRequest


class _BatchChatBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: StrictStr = Field(min_length=1)
    messages: list[list[ChatMessage]] = Field(min_length=1)
    max_tokens: StrictInt | None = Field(None, ge=1)
    max_completion_tokens: StrictInt | None = Field(None, ge=1)
    stream: StrictBool | None = False
    n: StrictInt | None = 1


def parse_batch_chat(body: dict[str, Any]) -> Parsed:
    try:
        parsed = _BatchChatBody.model_validate(body)
    except ValidationError as exc:
        raise refused(exc) from exc
    if parsed.stream:
        raise InvalidRequest("stream: batch chat completions are not streamed", param="stream")
    if body.get("tools"):
        raise InvalidRequest("tools: batch chat completions do not support tools", param="tools")
    if parsed.n not in (None, 1):
        raise InvalidRequest("n: batch chat completions do not support n > 1", param="n")
    for index, conversation in enumerate(parsed.messages):
        if not conversation:
            raise InvalidRequest(f"messages.{index}: a conversation is empty", param="messages")
    max_tokens, param = parsed.max_tokens, "max_tokens"
    if parsed.max_completion_tokens is not None:
        max_tokens, param = parsed.max_completion_tokens, "max_completion_tokens"
    return Parsed(
        model=parsed.model,
        prompts=tuple(Prompt(text=chat_text(conversation)) for conversation in parsed.messages),
        max_tokens=max_tokens,
        max_tokens_param=param,
    )
