"""Which engine holds which response of the Responses API.

vLLM keeps a response (with ``VLLM_ENABLE_RESPONSES_API_STORE`` on) in the
memory of the engine that made it: ``GET /v1/responses/{id}``, its cancel
and a new response's ``previous_response_id`` only work on that engine. The
gateway chooses every response's id (``resp_`` and its own request id: see
``app.request.owned_fields``) and remembers, for a completed response, the engine
that made it, its tenant and its tokens (input and output: the history a
continuation carries into its prompt).

The memory is bounded and expires: at most ``GATEWAY_RESPONSES_REMEMBERED``
responses, each for ``GATEWAY_RESPONSES_REMEMBER_SECONDS``, the least
recently made forgotten first. What it does not hold — forgotten, made
through another replica or before a restart — is looked for: every engine
that may take requests (and serves the model, for a continuation) is asked
for the response, and the one that answers holds it. Its tenant is then not
known; a response id is a secret of whoever was given it (128 random bits).
A response the memory says is another tenant's is not found.
"""

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

from app.engine.client import EngineClient
from app.engine.pool import EnginePool
from app.relay.usage import answer_usage
from app.request.errors import EngineUnavailable, GatewayError, ResponseNotFound
from app.request.routes import ROUTES

# How long asking one engine for a response may take.
LOOK_SECONDS = 5.0


@dataclass(frozen=True)
class Holder:
    """The engine that holds a response, whose it is (None: not known),
    and the tokens it used (input and output)."""

    engine: str
    tenant: str | None
    tokens: int


class ResponseHolders:
    def __init__(
        self, capacity: int, ttl: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._capacity = capacity
        self._ttl = ttl
        self._clock = clock
        self._held: OrderedDict[str, tuple[Holder, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    def remember(self, response_id: str, holder: Holder) -> None:
        self._held[response_id] = (holder, self._clock() + self._ttl)
        self._held.move_to_end(response_id)
        while len(self._held) > self._capacity:
            self._held.popitem(last=False)

    def recall(self, response_id: str) -> Holder | None:
        """The holder remembered for ``response_id``, unless expired."""
        entry = self._held.get(response_id)
        if entry is None:
            return None
        holder, expires = entry
        if expires <= self._clock():
            del self._held[response_id]
            return None
        return holder


class Responses:
    """Where each response is: the memory, and the engines to look on."""

    def __init__(
        self, held: ResponseHolders, engines: EnginePool, client: EngineClient, retry_after: float
    ) -> None:
        self.held = held
        self._engines = engines
        self._client = client
        self._retry_after = retry_after

    async def locate(self, response_id: str, tenant: str, model: str | None = None) -> Holder:
        """The engine holding ``response_id`` for ``tenant`` (one that serves
        ``model``, if given), or the error to answer: not found (404), or its
        engine not taking requests now (503)."""
        engines = self._engines
        holder = self.held.recall(response_id)
        if holder is not None:
            if holder.tenant is not None and holder.tenant != tenant:
                raise ResponseNotFound(response_id)
            view = engines.views.get(holder.engine)
            if view is None:
                raise ResponseNotFound(response_id, ": the engine that held it has left the fleet")
            if not view.routable:
                raise EngineUnavailable(
                    f"the engine that holds response '{response_id}' is not available",
                    retry_after=self._retry_after,
                )
            return holder
        path = f"/v1/responses/{quote(response_id, safe='')}"
        for view in list(engines.views.values()):
            if not view.routable or (model is not None and model not in view.models):
                continue
            try:
                answer = await self._client.get(view.url, path, timeout=LOOK_SECONDS)
            except GatewayError:
                continue
            if answer.status == 200:
                found = Holder(view.url, None, _tokens(answer.body))
                self.held.remember(response_id, found)
                return found
        raise ResponseNotFound(response_id)


def _tokens(body: bytes) -> int:
    """A response's input and output tokens, from its ``usage``."""
    prompt, output = answer_usage(body, ROUTES["responses"].usage)
    return (prompt or 0) + (output or 0)
