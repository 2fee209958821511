"""An in-process engine whose every answer the test scripts (a fake upstream,
named as such: for the gateway's own glue, where the test must decide the
exact moment each byte arrives, fails or stops).

Served through ``httpx.MockTransport``, so the gateway's real engine client,
relay and admission run unchanged. Each completion request becomes an
``EngineCall`` the test receives from ``calls``; the test then decides what the
engine sends and when, and sees when the gateway closes the response (which,
for a real engine, is what aborts the request).
"""

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

MODEL = "tiny"
MAX_MODEL_LEN = 2048


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


class _Stream(httpx.AsyncByteStream):
    def __init__(self, call: "EngineCall") -> None:
        self._call = call

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            item = await self._call._parts.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    async def aclose(self) -> None:
        self._call.closed.set()


@dataclass(eq=False)
class EngineCall:
    """One request the gateway sent to the engine."""

    path: str
    headers: httpx.Headers
    body: dict[str, Any]
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    _parts: "asyncio.Queue[bytes | BaseException | None]" = field(default_factory=asyncio.Queue)
    _answer: "asyncio.Future[httpx.Response]" = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    def stream(self) -> None:
        """Answer 200 with a stream whose bytes ``send`` provides."""
        self._answer.set_result(
            httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=_Stream(self))
        )

    def send(self, data: bytes) -> None:
        self._parts.put_nowait(data)

    def end(self) -> None:
        self._parts.put_nowait(None)

    def fail(self, error: BaseException) -> None:
        """The next read raises ``error`` (a broken connection, a timeout)."""
        self._parts.put_nowait(error)

    def answer(self, status: int, body: dict[str, Any]) -> None:
        self._answer.set_result(httpx.Response(status, json=body))


@dataclass
class ScriptedEngine:
    kv_blocks: int = 24
    block_size: int = 16
    models: tuple[str, ...] = (MODEL,)
    # While False, every request to it fails to connect (an engine that is down).
    reachable: bool = True
    calls: "asyncio.Queue[EngineCall]" = field(default_factory=asyncio.Queue)
    metrics_text: str = ""
    # Raised instead of answering a completion (what the HTTP client raises
    # when, say, its pool has no free connection).
    completion_error: Exception | None = None

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if not self.reachable:
            raise httpx.ConnectError("connection refused", request=request)
        path = request.url.path
        if path == "/health":
            return httpx.Response(200)
        if path == "/v1/models":
            data = [
                {"id": name, "object": "model", "max_model_len": MAX_MODEL_LEN}
                for name in self.models
            ]
            return httpx.Response(200, json={"object": "list", "data": data})
        if path == "/metrics":
            return httpx.Response(200, text=self.metrics_text or self._metrics())
        if self.completion_error is not None:
            raise self.completion_error
        call = EngineCall(path, request.headers, json.loads(await request.aread()))
        self.calls.put_nowait(call)
        return await call._answer

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


def fleet(**engines: ScriptedEngine) -> dict[str, ScriptedEngine]:
    """Scripted engines by the ``host:port`` the gateway knows them at."""
    return {f"{name}:8000": engine for name, engine in engines.items()}


async def next_call(*engines: ScriptedEngine) -> tuple[ScriptedEngine, EngineCall]:
    """The next call any of ``engines`` receives."""
    while True:
        for engine in engines:
            if not engine.calls.empty():
                return engine, engine.calls.get_nowait()
        await asyncio.sleep(0)


def fleet_transport(engines: dict[str, ScriptedEngine]) -> httpx.MockTransport:
    """One transport for several scripted engines, by host:port
    (``upstream_urls`` names them ``http://<host:port>``)."""

    async def handle(request: httpx.Request) -> httpx.Response:
        return await engines[f"{request.url.host}:{request.url.port}"].handle(request)

    return httpx.MockTransport(handle)
