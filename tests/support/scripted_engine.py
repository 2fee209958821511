"""An engine whose every answer the test scripts (a fake upstream, named as
such: for the gateway's own glue, where the test must decide the exact moment
each byte arrives, fails or stops).

A real HTTP server on 127.0.0.1 (aiohttp's, on a port of its own, in the
test's event loop), so the gateway's real engine client, relay and admission
run unchanged over real sockets, whichever HTTP client the gateway uses. It
answers ``/health``, ``/v1/models`` and ``/metrics`` as vLLM does; every
other request becomes an ``EngineCall`` the test receives from ``calls``. The
test then decides what the engine sends and when, and each failure is what an
engine does on the wire: it resets or closes the connection, stalls, answers
its health check late, or is down (nothing listens on its port). The call
sees when the gateway closes its connection (which, for a real engine, is
what aborts the request).
"""

import asyncio
import json
import socket
import struct
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from types import TracebackType
from typing import Any, NoReturn

from aiohttp import web

MODEL = "tiny"
MAX_MODEL_LEN = 2048
HOST = "127.0.0.1"


def chunk(text: str, finish: str | None = None) -> bytes:
    """One completion stream event, as vLLM writes them."""
    body = {
        "id": "cmpl-scripted",
        "object": "text_completion",
        "model": MODEL,
        "choices": [{"index": 0, "text": text, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def usage_chunk(prompt: int, completion: int) -> bytes:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    return (
        b"data: "
        + json.dumps({"choices": [], "usage": usage}, separators=(",", ":")).encode()
        + b"\n\n"
    )


DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True)
class _Drop:
    """The engine's end of the connection goes away."""

    reset: bool


_STREAM = object()
_END = object()


def _form(content_type: str, raw: bytes) -> dict[str, Any]:
    """A form's fields as vLLM reads them: text, and a file's bytes (read
    with the standard library's MIME parser, not the gateway's)."""
    message = BytesParser(policy=HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + raw
    )
    fields: dict[str, Any] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        # A field's text as str, a file's bytes as bytes (its media type's).
        fields[str(name)] = part.get_content()
    return fields


@dataclass(eq=False)
class EngineCall:
    """One request the gateway sent to the engine."""

    path: str
    headers: Mapping[str, str]
    body: dict[str, Any]
    # The connection had carried an earlier request (the gateway kept it alive).
    kept_alive: bool
    method: str = "POST"
    # Set once the call is over for the engine: its whole answer sent, or its
    # connection gone (the gateway closed it, or the engine dropped it).
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    _parts: "asyncio.Queue[bytes | object]" = field(default_factory=asyncio.Queue)
    _answer: "asyncio.Future[object]" = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    def stream(self) -> None:
        """Answer 200 with a stream whose bytes ``send`` provides."""
        self._answer.set_result(_STREAM)

    def send(self, data: bytes) -> None:
        """Bytes of the stream, in order (TCP may hand the gateway several
        sends at once, or one in parts, as with a real engine)."""
        self._parts.put_nowait(data)

    def end(self) -> None:
        """The stream's last chunk: the answer is whole."""
        self._parts.put_nowait(_END)

    def answer(self, status: int, body: dict[str, Any]) -> None:
        self._answer.set_result(web.json_response(body, status=status))

    def drop(self, *, reset: bool = True) -> None:
        """After what was sent so far, the engine's end of the connection goes
        away: reset (RST, "connection reset by peer") or closed (FIN, the
        server disconnected), as when its process dies. Before ``stream`` or
        ``answer``, with no answer at all."""
        if self._answer.done():
            self._parts.put_nowait(_Drop(reset))
        else:
            self._answer.set_result(_Drop(reset))

    async def wait_closed(self, timeout: float = 30) -> None:
        """Until the call is over for the engine (``closed``); the server sees
        the gateway's close a turn of the loop after the gateway made it."""
        await asyncio.wait_for(self.closed.wait(), timeout)

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        answer = await self._answer
        if isinstance(answer, _Drop):
            await _drop(request, answer.reset)
        if isinstance(answer, web.StreamResponse):
            return answer
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        while True:
            part = await self._parts.get()
            if part is _END:
                await response.write_eof()
                return response
            if isinstance(part, _Drop):
                await _drop(request, part.reset)
            assert isinstance(part, bytes)
            await response.write(part)


async def _drop(request: web.Request, reset: bool) -> NoReturn:
    transport = request.transport
    if transport is not None:
        if reset:
            # Linger 0: the close sends RST, not FIN.
            sock = transport.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    # The server cancels this handler as it sees the connection gone.
    await asyncio.get_running_loop().create_future()
    raise AssertionError("unreachable")


@dataclass(eq=False)
class ScriptedEngine:
    """Started and stopped as an async context manager (the in-process
    gateway does it for the engines it is given that are not running)."""

    kv_blocks: int = 24
    block_size: int = 16
    models: tuple[str, ...] = (MODEL,)
    # LoRA adapters it serves beside them, each with its base model (its
    # parent in /v1/models, as vLLM lists them).
    adapters: dict[str, str] = field(default_factory=dict)
    # False: nothing listens on its port from the start (an engine that is down).
    reachable: bool = True
    metrics_text: str = ""
    calls: "asyncio.Queue[EngineCall]" = field(default_factory=asyncio.Queue)
    # Requests received, by path.
    requests: Counter[str] = field(default_factory=Counter)
    # Cleared while /health answers only once the gateway has given up waiting.
    _health_on_time: asyncio.Event = field(default_factory=asyncio.Event)
    _runner: web.AppRunner | None = None
    _site: web.TCPSite | None = None
    # Holds the port while nothing listens on it (SO_REUSEPORT), so the engine
    # comes back on the same one.
    _port_holder: socket.socket | None = None
    _port: int | None = None
    # Requests received on each connection.
    _requests_on: Counter[object] = field(default_factory=Counter)
    _arrivals: list["asyncio.Future[None]"] = field(default_factory=list)

    @property
    def port(self) -> int:
        """Its port, from its start on (still its after it stopped)."""
        assert self._port is not None, "the engine is not started"
        return self._port

    def __repr__(self) -> str:
        return f"ScriptedEngine({self._port or 'not started'})"

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def label(self) -> str:
        """Its name in the gateway's metrics and logs."""
        return f"{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self._runner is not None

    async def __aenter__(self) -> "ScriptedEngine":
        self._health_on_time.set()
        holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        holder.bind((HOST, 0))
        self._port_holder = holder
        self._port = holder.getsockname()[1]
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._route)
        # Cancelled handlers are how a call sees the gateway close its connection.
        self._runner = web.AppRunner(
            app, handler_cancellation=True, access_log=None, shutdown_timeout=5
        )
        await self._runner.setup()
        if self.reachable:
            await self.come_back()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.go_down()
        assert self._runner is not None
        assert self._port_holder is not None
        await self._runner.cleanup()
        self._port_holder.close()
        self._runner = self._port_holder = None
        self._requests_on.clear()

    async def go_down(self) -> None:
        """The engine's process is gone: its connections closed, and nothing
        listens on its port (a connection to it is refused)."""
        self.reachable = False
        if self._site is not None:
            await self._site.stop()
            self._site = None
        assert self._runner is not None
        assert self._runner.server is not None
        for connection in self._runner.server.connections:
            if connection.transport is not None:
                connection.transport.abort()

    async def come_back(self) -> None:
        """Listening again, on the same port."""
        assert self._runner is not None
        assert self._site is None
        self._site = web.TCPSite(self._runner, HOST, self.port, reuse_port=True)
        await self._site.start()
        self.reachable = True

    def answer_health_late(self, late: bool = True) -> None:
        """While ``late``, /health answers only after the gateway's check has
        given up (an engine too busy to answer in time); then on time again."""
        if late:
            self._health_on_time.clear()
        else:
            self._health_on_time.set()

    async def _route(self, request: web.Request) -> web.StreamResponse:
        self._requests_on[request.protocol] += 1
        self.requests[request.path] += 1
        return await self.handle(request)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """What vLLM answers on each path (a subclass may note or change it)."""
        path = request.path
        if path == "/health":
            await self._health_on_time.wait()
            return web.Response()
        if path == "/v1/models":
            data = [
                {"id": name, "object": "model", "max_model_len": MAX_MODEL_LEN, "parent": None}
                for name in self.models
            ] + [
                {"id": name, "object": "model", "root": f"/adapters/{name}", "parent": parent}
                for name, parent in self.adapters.items()
            ]
            return web.json_response({"object": "list", "data": data})
        if path == "/metrics":
            return web.Response(text=self.metrics_text or self._metrics())
        return await self._completion(request)

    async def _completion(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        call = EngineCall(
            request.path,
            request.headers,
            _form(request.headers["content-type"], raw)
            if request.content_type == "multipart/form-data"
            else json.loads(raw)
            if raw
            else {},
            self._requests_on[request.protocol] > 1,
            request.method,
        )
        self.calls.put_nowait(call)
        for arrival in self._arrivals:
            if not arrival.done():
                arrival.set_result(None)
        try:
            return await call._serve(request)
        finally:
            call.closed.set()

    def _metrics(self) -> str:
        return (
            "# TYPE vllm:cache_config_info gauge\n"
            f'vllm:cache_config_info{{block_size="{self.block_size}",'
            f'num_gpu_blocks="{self.kv_blocks}"}} 1.0\n'
            "# TYPE vllm:num_preemptions_total counter\n"
            'vllm:num_preemptions_total{model_name="tiny"} 0.0\n'
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            'vllm:kv_cache_usage_perc{model_name="tiny"} 0.0\n'
        )


async def next_call(
    *engines: ScriptedEngine, timeout: float = 30
) -> tuple[ScriptedEngine, EngineCall]:
    """The next call any of ``engines`` receives (``TimeoutError`` if none
    does within ``timeout`` seconds)."""
    async with asyncio.timeout(timeout):
        while True:
            for engine in engines:
                if not engine.calls.empty():
                    return engine, engine.calls.get_nowait()
            arrival: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            for engine in engines:
                engine._arrivals.append(arrival)
            try:
                await arrival
            finally:
                for engine in engines:
                    engine._arrivals.remove(arrival)
