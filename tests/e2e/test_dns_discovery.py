"""Engines found by DNS: ``GATEWAY_UPSTREAM_URLS=dns+http://name:port``, the way
the Kubernetes manifests find them (a headless Service answers with one
address per ready engine pod).

A real DNS server (dnsmasq, ``tests/support/dns.py``) answers for the name, and
the test changes its answer: an engine's address added, then removed. The
engine is the session's real vLLM, which listens on every address, so
127.0.0.2:P and 127.0.0.3:P are two engines to the gateway.

Why a mount namespace: the gateway resolves through glibc
(``loop.getaddrinfo``), which asks the servers /etc/resolv.conf names, on
port 53, and can be pointed nowhere else. Editing the machine's resolv.conf
would send every other process's lookups to the test's server; instead the
gateway runs in a mount namespace of its own where a resolv.conf naming the
test's server is bind-mounted over the real one — only the gateway sees it,
and it is gone with the gateway.
"""

import asyncio
import json
import socket
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from openai import AsyncOpenAI

from deploy.local import scrape
from tests.support.dns import DnsServer, resolving_through
from tests.support.engines import KV_EVENTS, MODEL, Engine
from tests.support.gateways import Gateway, launch_gateway
from tests.support.raw_http import request_bytes
from tests.support.wait import wait_until

NAME = "engines.test"
# Re-resolved this often (seconds), so that a changed answer shows at once.
DNS_INTERVAL = 0.2


@pytest.fixture
def dns(tmp_path: Path) -> Iterator[DnsServer]:
    server = DnsServer(tmp_path)
    try:
        yield server
    finally:
        server.stop()


def start_discovering_gateway(log_dir: Path, dns: DnsServer, upstream_urls: str) -> Gateway:
    """A gateway whose name lookups go to ``dns`` alone."""
    settings: dict[str, object] = {
        "upstream_urls": upstream_urls,
        "upstream_dns_interval": DNS_INTERVAL,
        # The held streams below wait on purpose; far longer than any wait here.
        "sse_send_timeout": 300,
        # Each address's KV cache events, at that address.
        **KV_EVENTS,
        # Routed by load, not by the prompt: with events the default is prefix
        # routing, which breaks ties by the prompt's key and the engine's id,
        # whose port is the session's — the held streams below would land by
        # chance. Which engine is chosen here must follow from the loads alone.
        "routing": "least_loaded",
    }
    return launch_gateway(log_dir, upstream_urls, settings, partial(resolving_through, dns))


def engines_up(gateway: Gateway) -> int:
    """How many engines ``/health/ready`` says are up."""
    reply = httpx.get(f"{gateway.url}/health/ready", timeout=10)
    return int(reply.json()["engines_up"]) if reply.status_code == 200 else 0


def engines_seen_up(gateway: Gateway, metric: str = "gateway_upstream_up") -> set[str]:
    return {s.labels["engine"] for s in scrape(gateway.url) if s.name == metric and s.value == 1}


def events_heard(gateway: Gateway) -> set[str]:
    """The engines whose KV cache events the gateway hears, in sequence."""
    return engines_seen_up(gateway, "gateway_kv_events_up")


def events_series(gateway: Gateway) -> set[str]:
    return {s.labels["engine"] for s in scrape(gateway.url) if s.name == "gateway_kv_events_up"}


def routed(gateway: Gateway, engine: str) -> float:
    return gateway.metric("gateway_engine_requests_total", engine=engine)


def series_of(gateway: Gateway, engine: str) -> set[str]:
    """The names of the gateway's series labelled with ``engine``."""
    return {s.name for s in scrape(gateway.url) if s.labels.get("engine") == engine}


async def complete(client: AsyncOpenAI, prompt: str) -> None:
    """A short completion through the gateway, answered whole."""
    reply = await client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=8, extra_body={"ignore_eos": True}
    )
    assert reply.usage is not None
    assert reply.usage.completion_tokens == 8


async def eventually(check: Callable[[], bool], timeout: float = 60) -> bool:
    return await asyncio.to_thread(wait_until, check, timeout)


class HeldStream:
    """A streamed completion whose client stops reading after the first
    event until ``finish``: the request stays in flight at the gateway
    however fast the engine writes, since its answer (hundreds of KB, with
    logprobs) is far more than the sockets between them buffer — a small
    receive buffer and segment size keep the gateway's send buffer small."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._received = b""

    @classmethod
    async def open(cls, url: str, max_tokens: int) -> "HeldStream":
        parts = urlsplit(url)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 536)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (parts.hostname, parts.port))
        reader, writer = await asyncio.open_connection(sock=sock, limit=4096)
        held = cls(reader, writer)
        body = {
            "model": MODEL,
            "prompt": f"Held {max_tokens}",
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "logprobs": 20,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        head, raw = request_bytes("/v1/completions", body, extra="Connection: close\r\n")
        writer.write(head + raw)
        await writer.drain()
        while b"data: " not in held._received.partition(b"\r\n\r\n")[2]:
            chunk = await reader.read(4096)
            assert chunk, f"the stream ended before its first event: {held._received!r}"
            held._received += chunk
        return held

    async def finish(self) -> tuple[int, list[Any]]:
        """Read the rest: the status and the stream's events (``[DONE]`` last)."""
        self._received += await self._reader.read()
        self.close()
        head, _, body = self._received.partition(b"\r\n\r\n")
        status = int(head.split()[1])
        events = []
        for block in _unchunk(body).split(b"\n\n"):
            if block.startswith(b"data: "):
                data = block.removeprefix(b"data: ")
                events.append("[DONE]" if data == b"[DONE]" else json.loads(data))
        return status, events

    def close(self) -> None:
        self._writer.close()


def _unchunk(body: bytes) -> bytes:
    """A chunked transfer-coded body, decoded."""
    out = b""
    while body:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out += body[:size]
        body = body[size + 2 :]
    return out


async def test_engines_follow_the_dns_answer_and_a_removed_one_finishes_its_requests(
    idle_engine: Engine, dns: DnsServer, tmp_path: Path
) -> None:
    port = urlsplit(idle_engine.url).port
    first, second = f"127.0.0.2:{port}", f"127.0.0.3:{port}"
    dns.answer(NAME, ["127.0.0.2"])
    gateway = start_discovering_gateway(tmp_path, dns, f"dns+http://{NAME}:{port}")
    client = AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0, timeout=120)
    held: list[HeldStream] = []
    try:
        # One address: one engine, and the gateway serves through it.
        assert await eventually(lambda: engines_up(gateway) == 1), gateway.process.log_tail()
        assert engines_seen_up(gateway) == {first}
        # Its KV cache events found beside its address.
        assert await eventually(lambda: events_heard(gateway) == {first})
        await complete(client, "One")
        assert routed(gateway, first) == 1

        # A second address: a second engine, and it is used. The first held
        # stream goes to the first engine (equal loads: the lower id); the
        # second one to the second engine, the less loaded then.
        dns.answer(NAME, ["127.0.0.2", "127.0.0.3"])
        assert await eventually(lambda: engines_up(gateway) == 2), gateway.process.log_tail()
        assert engines_seen_up(gateway) == {first, second}
        assert await eventually(lambda: events_heard(gateway) == {first, second})
        held.append(await HeldStream.open(gateway.url, max_tokens=800))
        assert routed(gateway, first) == 2
        held.append(await HeldStream.open(gateway.url, max_tokens=600))
        assert routed(gateway, second) == 1

        # The address removed: the second engine is forgotten while its
        # stream is still in flight; new requests all go to the first — had
        # the second stayed, they would go there, where less is reserved.
        # Lookups follow one another, so once a second one has begun, the
        # gateway has acted on the new answer.
        dns.answer(NAME, ["127.0.0.2"])
        answered = dns.lookups(NAME)
        assert await eventually(lambda: dns.lookups(NAME) >= answered + 2)
        assert await eventually(lambda: engines_up(gateway) == 1), gateway.process.log_tail()
        assert events_series(gateway) == {first}
        assert gateway.metric("gateway_requests_in_flight") == 2
        for i in range(4):
            await complete(client, f"After {i}")
        assert routed(gateway, first) == 2 + 4
        # Every series of the forgotten engine went with it (no stale "up", no
        # alert for an address that is gone), though its stream is still open.
        assert series_of(gateway, second) == set()
        assert "gateway_upstream_up" in series_of(gateway, first)

        # Neither held stream was lost, the removed engine's included.
        for stream, max_tokens in zip(held, (800, 600), strict=True):
            status, events = await stream.finish()
            assert status == 200
            assert events[-1] == "[DONE]"
            assert events[-2]["usage"]["completion_tokens"] == max_tokens
        held.clear()
        assert await eventually(lambda: gateway.metric("gateway_requests_total") == 1 + 2 + 4)
        assert gateway.metric("gateway_requests_total", outcome="completed") == 1 + 2 + 4
        # And what they held was given back, on the forgotten engine too,
        # which brought none of its series back.
        assert await eventually(lambda: gateway.metric("gateway_requests_in_flight") == 0)
        assert series_of(gateway, second) == set()
        assert "Traceback" not in gateway.process.log_text()
    finally:
        for stream in held:
            stream.close()
        await client.close()
        gateway.process.stop()
