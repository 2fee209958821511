"""The floor of a relay on the gateway's own stack, for the overhead
benchmark's target ``bare``.

uvicorn (uvloop, httptools, as the gateway runs it) takes the client's
request and aiohttp streams the engine's answer back with one ``send`` per
read, its idle limit per read as the gateway sets it — and nothing else: no
body parsing, no admission, no routing, no metrics, no record, no
cancellation watch. What the gateway spends per token beyond it is its own
code's; what this spends beyond vllm-router and nginx is the stack's, a
Python read and a Python send per event. It is not a server for anyone to
use: a request that fails upstream ends its connection.

Run: ``BARE_RELAY_UPSTREAM=http://127.0.0.1:8000 BARE_RELAY_PORT=9000
python -m benchmarks.overhead.bare_relay``.
"""

import os

import aiohttp
import uvicorn
from starlette.types import Receive, Scope, Send

# The gateway's idle limit between two reads of a stream
# (GATEWAY_UPSTREAM_READ_TIMEOUT's default): aiohttp re-arms it per read.
_READ_TIMEOUT = 120.0


class BareRelay:
    """An ASGI app that passes every request on to ``upstream`` and its
    answer back as it arrives; ``GET /health`` answers itself."""

    def __init__(self, upstream: str) -> None:
        self._upstream = upstream.rstrip("/")
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0),
                timeout=aiohttp.ClientTimeout(total=None, sock_read=_READ_TIMEOUT),
            )
        return self._session

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["path"] == "/health":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        headers = {"content-type": "application/json"}
        url = self._upstream + scope["path"]
        async with self._client().request(scope["method"], url, data=body, headers=headers) as up:
            content_type = up.headers.get("content-type", "application/json").encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": up.status,
                    "headers": [(b"content-type", content_type)],
                }
            )
            while chunk := await up.content.readany():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def main() -> None:
    uvicorn.run(
        BareRelay(os.environ["BARE_RELAY_UPSTREAM"]),
        host="127.0.0.1",
        port=int(os.environ["BARE_RELAY_PORT"]),
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
