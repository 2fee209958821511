"""Client-side helpers for streaming requests in tests."""

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx


@contextlib.asynccontextmanager
async def open_stream(
    http: httpx.AsyncClient, body: dict[str, Any], path: str = "/v1/completions", **headers: str
) -> AsyncIterator[httpx.Response]:
    """A streaming request whose response headers are in; closed on exit
    (which, mid-stream, is a client disconnect)."""
    request = http.build_request("POST", path, json={**body, "stream": True}, headers=headers)
    response = await http.send(request, stream=True)
    try:
        yield response
    finally:
        await response.aclose()


async def hold_streams(
    http: httpx.AsyncClient, url: str, body: dict[str, Any], count: int
) -> list[httpx.Response]:
    """``count`` streams with their headers in and their bodies unread: they
    hold engine (or admission) capacity until closed."""
    streams = []
    for i in range(count):
        request = http.build_request(
            "POST",
            f"{url}/v1/completions",
            json={**body, "prompt": f"Hold {i} {body.get('prompt', '')}", "stream": True},
        )
        streams.append(await http.send(request, stream=True))
    return streams


async def read_content_chunks(response: httpx.Response, count: int) -> None:
    """Read until ``count`` completion chunks with text have arrived.

    Returning leaves the raw iterator to be closed: the connection goes away.
    """
    seen = 0
    async for raw in response.aiter_raw():
        seen += raw.count(b'"text":"') - raw.count(b'"text":""')
        if seen >= count:
            return
