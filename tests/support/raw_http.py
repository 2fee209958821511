"""HTTP by hand over a socket, for what no client library does on purpose:
abandon an upload, speak HTTP/1.0, pipeline requests, leave at a chosen byte."""

import asyncio
import contextlib
import json
from typing import Any
from urllib.parse import urlsplit


def request_bytes(
    path: str,
    body: dict[str, Any] | bytes,
    *,
    version: str = "1.1",
    content_length: int | None = None,
    extra: str = "",
) -> tuple[bytes, bytes]:
    """(head, body) of a POST; ``content_length`` may claim more than is sent."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    length = len(raw) if content_length is None else content_length
    head = (
        f"POST {path} HTTP/{version}\r\nHost: gateway\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n{extra}\r\n"
    ).encode()
    return head, raw


async def connect(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    return await asyncio.open_connection(parts.hostname, parts.port)


async def close(writer: asyncio.StreamWriter) -> None:
    """A graceful close: everything written is delivered, then FIN."""
    writer.close()
    with contextlib.suppress(ConnectionError, OSError):
        await writer.wait_closed()


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One response with a Content-Length (or ending at connection close)."""
    status_line = await reader.readline()
    status = int(status_line.split()[1])
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    else:
        body = await reader.read()
    return status, headers, body
