"""Calling the gateway's ASGI app in-process, with the client's side scripted.

As Starlette tests its own streaming: the test owns ``receive`` (the body's
parts, and the moment the client disconnects) and ``send`` (what the client
gets, and whether it takes it), so races are set up, not slept into. The
engine behind is a ``ScriptedEngine``, over real connections; the app, its
lifespan, admission and relay are the real ones.
"""

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from starlette.types import Message

from app.main import create_app
from app.serve.drain import Drain
from app.serve.services import Services
from app.settings import Settings
from tests.support.scripted_engine import ScriptedEngine


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels``."""
    return sum(
        s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


class Exchange:
    """One request and its response."""

    def __init__(
        self,
        app: FastAPI,
        state: dict[str, Any],
        path: str,
        headers: list[tuple[bytes, bytes]],
        http_version: str,
        method: str = "POST",
        port: int = 8000,
    ) -> None:
        self._incoming: asyncio.Queue[Message] = asyncio.Queue()
        self.messages: list[Message] = []
        self._changed = asyncio.Event()
        self._gate: asyncio.Event | None = None
        # Set once a send waits for a client that stopped reading.
        self.send_blocked = asyncio.Event()
        self._block_after: int | None = None
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": http_version,
            "method": method,
            "scheme": "http",
            "path": path.partition("?")[0],
            "raw_path": path.partition("?")[0].encode(),
            "query_string": path.partition("?")[2].encode(),
            "root_path": "",
            "headers": headers,
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", port),
            "state": dict(state),
        }
        self.task = asyncio.create_task(app(scope, self._receive, self._send))

    # --- the client's side ---------------------------------------------------

    def send_body(self, data: bytes, *, more: bool = False) -> None:
        self._incoming.put_nowait({"type": "http.request", "body": data, "more_body": more})

    def disconnect(self) -> None:
        self._incoming.put_nowait({"type": "http.disconnect"})

    def stop_reading_after(self, body_messages: int) -> None:
        """From the ``body_messages``-th body message on, sends block (a
        client whose socket buffer is full)."""
        self._block_after = body_messages
        self._gate = asyncio.Event()

    def read_again(self) -> None:
        """The client reads again: blocked sends go through."""
        assert self._gate is not None
        self._gate.set()

    async def _receive(self) -> Message:
        return await self._incoming.get()

    async def _send(self, message: Message) -> None:
        if message["type"] == "http.response.body" and self._gate is not None:
            sent = sum(1 for m in self.messages if m["type"] == "http.response.body")
            if self._block_after is not None and sent >= self._block_after:
                self.send_blocked.set()
                await self._gate.wait()
        self.messages.append(message)
        self._changed.set()

    # --- what the client got -------------------------------------------------

    @property
    def status(self) -> int | None:
        for message in self.messages:
            if message["type"] == "http.response.start":
                return int(message["status"])
        return None

    @property
    def headers(self) -> dict[str, str]:
        for message in self.messages:
            if message["type"] == "http.response.start":
                return {k.decode(): v.decode() for k, v in message["headers"]}
        return {}

    @property
    def body(self) -> bytes:
        return b"".join(
            m.get("body", b"") for m in self.messages if m["type"] != "http.response.start"
        )

    def json(self) -> Any:
        return json.loads(self.body)

    async def wait_for(self, check: Callable[["Exchange"], bool]) -> None:
        """Wait until what the client got satisfies ``check``."""
        while not check(self):
            self._changed.clear()
            await self._changed.wait()

    async def done(self) -> "Exchange":
        await self.task
        return self


@dataclass
class InProcessGateway:
    app: FastAPI
    state: dict[str, Any]
    engine: ScriptedEngine

    @property
    def services(self) -> Services:
        services: Services = self.state["services"]
        return services

    def metric(self, name: str, **labels: str) -> float:
        return sample(self.services.metrics.registry, name, **labels)

    def request(
        self,
        path: str,
        body: dict[str, Any] | bytes | None = None,
        *,
        headers: dict[str, str] | None = None,
        http_version: str = "1.1",
        complete: bool = True,
        method: str = "POST",
        port: int = 8000,
    ) -> Exchange:
        """Start a request. With ``complete``, its whole body is sent at once;
        otherwise the test sends the body with ``send_body``."""
        raw = body if isinstance(body, bytes) else json.dumps(body).encode() if body else b""
        all_headers = {"content-type": "application/json", **(headers or {})}
        encoded = [(k.lower().encode(), v.encode()) for k, v in all_headers.items()]
        exchange = Exchange(self.app, self.state, path, encoded, http_version, method, port)
        if complete:
            exchange.send_body(raw)
        return exchange

    def settled(self) -> bool:
        """Nothing queued, in flight or reserved."""
        return (
            self.metric("gateway_queue_depth") == 0
            and self.metric("gateway_requests_in_flight") == 0
            and self.metric("gateway_kv_tokens_reserved") == 0
        )


@asynccontextmanager
async def in_process_gateway(
    engine: ScriptedEngine | None = None,
    drain: Drain | None = None,
    fleet: Sequence[ScriptedEngine] | None = None,
    **settings: Any,
) -> AsyncIterator[InProcessGateway]:
    """A gateway in front of one scripted engine, or of a ``fleet`` of them
    (the first is ``engine``), at their URLs. Engines not yet running are
    started here and stopped after the gateway."""
    engines = list(fleet) if fleet is not None else [engine or ScriptedEngine()]
    async with AsyncExitStack() as started:
        for one in engines:
            if not one.running:
                await started.enter_async_context(one)
        if fleet is not None:
            settings.setdefault("upstream_urls", ",".join(one.url for one in engines))
        else:
            settings.setdefault("upstream_url", engines[0].url)
        # Prompts estimated unless a test asks otherwise: with the default
        # (the engine's /tokenize) every request would make one more engine
        # call for the test to script. tests/tokens/ tests the counting.
        config = Settings(**{"health_interval": 3600, "prompt_tokens": "estimate", **settings})
        app = create_app(config, drain)
        async with app.router.lifespan_context(app) as state:
            yield InProcessGateway(app, dict(state or {}), engines[0])
