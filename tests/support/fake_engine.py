"""A fake upstream, for what a real engine cannot be made to do on demand.

Used only where the real engine cannot produce the situation: an exact byte
stream with awkward characters and chunking, a connection reset mid-stream,
a stall of chosen length, an engine that vanishes and comes back. Each
behaviour is a "model" name, so the gateway validates and routes it like any
other request.

``busy`` answers as vLLM 0.32 does when its own queue cap is full
(``--max-num-queued-reqs``: in-flight requests, waiting or running, counted
in the API server; a request with ``n`` > 1 counts ``n``). Captured from the
real engine (tests/e2e/test_engine_queue_cap.py checks it still matches):
for a streaming and a non-streaming request alike, on ``/v1/completions``
and ``/v1/chat/completions``::

    HTTP/1.1 503 Service Unavailable
    content-type: application/json
    (no Retry-After)

    {"error":{"message":"The engine is currently busy and cannot accept new
    requests. Please try again later or on a different instance.",
    "type":"Service Unavailable","param":null,"code":503}}

The refusal is made by ``AsyncLLM.check_admission`` (``QueueOverflowError``,
vllm/exceptions.py) before the response starts, and rendered by
``create_error_response`` (vllm/entrypoints/serve/exception_handling/),
which sets no header. ``--max-num-queued-tokens`` answers the same with the
message "The engine has reached its prefill token backlog limit. ...".
The same check runs again when the request is added to the engine: a stream
that passed the first check while others arrived at the same moment starts
as a 200 and carries the refusal as its only event, ``data: {"error": {...
"code": 503}}`` with spaces after the separators, then ``data: [DONE]``.
That is a race the real engine shows only by chance, under a burst.
"""

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

# vLLM's answer to a request over its queue cap, word for word (see above).
QUEUE_FULL = {
    "error": {
        "message": "The engine is currently busy and cannot accept new requests. "
        "Please try again later or on a different instance.",
        "type": "Service Unavailable",
        "param": None,
        "code": 503,
    }
}

# Characters str.splitlines() breaks on but SSE does not, raw inside JSON strings.
AWKWARD = "a\u2028b\u2029c\u0085d"


def _event(text: str, finish: str | None = None) -> bytes:
    chunk = {
        "id": "cmpl-fake",
        "object": "text_completion",
        "model": "fake",
        "choices": [{"index": 0, "text": text, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"


def awkward_stream() -> list[bytes]:
    """The exact writes of the ``awkward`` model: events split across writes
    and several events in one write, all carrying raw U+2028/U+2029/U+0085."""
    events = b"".join(_event(f"{AWKWARD}{i}") for i in range(20))
    events += _event("", finish="length") + b"data: [DONE]\n\n"
    sizes = [7, 1, 300, 2, 2, 50, 1000, 3]
    writes, position = [], 0
    for size in sizes:
        writes.append(events[position : position + size])
        position += size
    writes.append(events[position:])
    return [w for w in writes if w]


class FakeEngine:
    MODELS = ("awkward", "dies", "stalls", "stalls-before-headers", "no-done", "busy")

    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.app = Starlette(
            routes=[
                Route("/health", self._health),
                Route("/v1/models", self._models),
                Route("/metrics", self._metrics),
                Route("/v1/completions", self._completions, methods=["POST"]),
                Route("/v1/chat/completions", self._completions, methods=["POST"]),
            ]
        )

    # --- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise TimeoutError("fake engine did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._server.force_exit = True
            self._thread.join(timeout=10)
        self._server = None

    # --- routes --------------------------------------------------------------

    async def _health(self, request: Request) -> Response:
        return PlainTextResponse("")

    async def _models(self, request: Request) -> Response:
        data = [{"id": name, "object": "model", "max_model_len": 2048} for name in self.MODELS]
        return JSONResponse({"object": "list", "data": data})

    async def _metrics(self, request: Request) -> Response:
        return PlainTextResponse("")

    async def _completions(self, request: Request) -> Response:
        body = await request.json()
        model = body["model"]
        if model == "stalls-before-headers":
            await asyncio.sleep(3600)
        if model == "busy":
            # No Retry-After: vLLM sends none.
            return JSONResponse(QUEUE_FULL, status_code=503)
        stream = {
            "awkward": self._awkward,
            "dies": self._dies,
            "stalls": self._stalls,
            "no-done": self._no_done,
        }[model]
        return StreamingResponse(stream(), media_type="text/event-stream")

    async def _awkward(self) -> AsyncIterator[bytes]:
        for write in awkward_stream():
            yield write
            await asyncio.sleep(0.01)

    async def _dies(self) -> AsyncIterator[bytes]:
        for i in range(3):
            yield _event(f"token{i}")
            await asyncio.sleep(0.01)
        # Half an event, then the connection breaks as if the engine died.
        yield b'data: {"choices":[{"text":"tok'
        await asyncio.sleep(0.05)
        raise ConnectionResetError("engine process killed")

    async def _stalls(self) -> AsyncIterator[bytes]:
        yield _event("first")
        await asyncio.sleep(3600)

    async def _no_done(self) -> AsyncIterator[bytes]:
        yield _event("only")
