"""Counting a prompt with the engine's own ``/tokenize``.

One round trip to an engine that serves the model, answered by its API
server with the model's tokenizer and chat template (it does not touch the
scheduler or the KV cache): always what the engine will count, whatever the
request holds (tools, images, a template of its own).
"""

import json
from typing import Any

from app.engine.client import EngineClient
from app.request.errors import UpstreamFailed

# The fields of a chat request that the engine's chat /tokenize reads.
_CHAT_FIELDS = (
    "messages",
    "add_generation_prompt",
    "continue_final_message",
    "add_special_tokens",
    "chat_template",
    "chat_template_kwargs",
    "tools",
    "mm_processor_kwargs",
    "media_io_kwargs",
)


class EngineTokenize:
    def __init__(self, client: EngineClient, timeout: float) -> None:
        self._client = client
        self._timeout = timeout

    async def chat(
        self, engine: str, model: str, body: dict[str, Any], request_id: str
    ) -> tuple[int, ...]:
        asked = {"model": model, **{f: body[f] for f in _CHAT_FIELDS if f in body}}
        return await self._ask(engine, asked, request_id)

    async def text(
        self, engine: str, model: str, text: str, add_special_tokens: bool, request_id: str
    ) -> tuple[int, ...]:
        asked = {"model": model, "prompt": text, "add_special_tokens": add_special_tokens}
        return await self._ask(engine, asked, request_id)

    async def _ask(self, engine: str, asked: dict[str, Any], request_id: str) -> tuple[int, ...]:
        """The ids the engine answers; its refusal as ``EngineStatusError``,
        any other failure as a ``GatewayError``."""
        body = json.dumps(asked, separators=(",", ":"), ensure_ascii=False).encode()
        response = await self._client.open(
            engine, "/tokenize", body, request_id, stream=False, timeout=self._timeout
        )
        try:
            content = await response.read()
        finally:
            response.close()
        try:
            tokens = json.loads(content)["tokens"]
            return tuple(int(token) for token in tokens)
        except (ValueError, KeyError, TypeError) as exc:
            raise UpstreamFailed(f"the engine's /tokenize answer has no tokens: {exc}") from exc
