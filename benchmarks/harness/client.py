"""The measuring client: aiohttp (cheaper per chunk than httpx) with events
cut by ``loadtests.meter.StreamMeter``, which parses JSON only for the first
token and the usage chunk — on two cores the client shares a core with the
gateway, so what the client costs is taken from what the gateway can show.
Also closed-loop users and the engine's idle state."""

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from app.observe.promtext import Sample, parse, total
from loadtests.meter import StreamMeter

CHAT = "/v1/chat/completions"


@dataclass
class Call:
    """One request as the client saw it (times from ``time.perf_counter``)."""

    status: int
    started: float
    finished: float = 0.0
    first_token: float | None = None
    completion_tokens: int = 0
    prompt_tokens: int | None = None
    # Content events of a stream: more tokens than events means the sender
    # merged tokens into one chunk (vLLM does when its reader falls behind).
    events: int = 0
    gaps: list[float] = field(default_factory=list)
    retry_after: float | None = None
    # A refusal's error code (the gateway's ``error.code``), when it said
    # one, or that of an error event ending a stream after its 200 head.
    error_code: str = ""
    # Error events in a stream (one at most is the contract: the last event).
    error_events: int = 0
    request_id: str = ""
    user: int = 0
    label: str = ""
    streamed: bool = True
    # The engine's own queue and time to first token (seconds), where it said.
    engine_time: float | None = None
    # Its time from arrival to admission in the gateway (seconds: the
    # ``queue`` of the head's ``Server-Timing``, its intake included); None
    # from anything that does not say one.
    gateway_queue: float | None = None

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.started

    @property
    def residual(self) -> float | None:
        """The TTFT less the engine's own queue and time to first token:
        what everything in front of the engine's core added."""
        ttft = self.ttft
        return None if ttft is None or self.engine_time is None else ttft - self.engine_time

    @property
    def relay_residual(self) -> float | None:
        """The residual less the gateway's arrival to admission: what the
        path in front of the engine added besides holding the request back
        (its intake, a few milliseconds, goes with it; a relay without a
        queue: its residual)."""
        residual = self.residual
        return None if residual is None else residual - (self.gateway_queue or 0.0)

    @property
    def latency(self) -> float:
        return self.finished - self.started


class Client:
    """A lean HTTP client for many concurrent streams (one aiohttp session,
    no connection limit)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> "Client":
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_read=600),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "use the client in `async with`"
        return self._session

    async def stream(
        self, body: dict[str, Any], headers: dict[str, str] | None = None, path: str = CHAT
    ) -> Call:
        """A streaming completion; asks for usage (tokens are counted from
        it, not from chunks)."""
        payload = {**body, "stream": True, "stream_options": {"include_usage": True}}
        call = Call(status=0, started=time.perf_counter())
        hdrs = _with_id(call, headers)
        try:
            async with self.session.post(self.base_url + path, json=payload, headers=hdrs) as resp:
                call.status = resp.status
                if resp.status != 200:
                    call.error_code = _error_code(await resp.read())
                    call.retry_after = _retry_after(resp.headers.get("retry-after"))
                    call.finished = time.perf_counter()
                    return call
                call.gateway_queue = queue_wait(resp.headers.get("server-timing"))
                meter = StreamMeter(started=call.started)
                errors = ErrorEvents()
                async for data in resp.content.iter_any():
                    meter.feed(data, time.perf_counter())
                    errors.feed(data)
        except (TimeoutError, aiohttp.ClientError):
            call.status = -1
            call.finished = time.perf_counter()
            return call
        call.finished = time.perf_counter()
        call.first_token = meter.first_token
        call.engine_time = meter.engine_time
        call.completion_tokens = meter.completion_tokens or 0
        call.events = meter.content_events
        call.gaps = meter.gaps
        call.error_events = errors.count
        if errors.count:
            call.error_code = errors.code()
        if meter.completion_tokens is None:
            call.status = -2  # the stream ended without its usage chunk
        return call

    async def complete(
        self, body: dict[str, Any], headers: dict[str, str] | None = None, path: str = CHAT
    ) -> Call:
        """A non-streaming completion."""
        call = Call(status=0, started=time.perf_counter(), streamed=False)
        hdrs = _with_id(call, headers)
        try:
            async with self.session.post(
                self.base_url + path, json={**body, "stream": False}, headers=hdrs
            ) as resp:
                call.status = resp.status
                raw = await resp.read()
                call.finished = time.perf_counter()
                if resp.status != 200:
                    call.retry_after = _retry_after(resp.headers.get("retry-after"))
                    return call
        except (TimeoutError, aiohttp.ClientError):
            call.status = -1
            call.finished = time.perf_counter()
            return call
        usage = json.loads(raw).get("usage") or {}
        call.completion_tokens = int(usage.get("completion_tokens") or 0)
        call.prompt_tokens = usage.get("prompt_tokens")
        call.first_token = call.finished
        return call

    async def metrics(self, base_url: str | None = None, names: Iterable[str] = ()) -> list[Sample]:
        """The samples of ``/metrics`` (only the series in ``names`` when given)."""
        url = (base_url or self.base_url).rstrip("/") + "/metrics"
        try:
            async with self.session.get(url) as resp:
                text = await resp.text()
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            # A kept-alive connection the server closed as it was reused
            # (uvicorn closes idle ones after 5 s; after a load the pool can
            # hold several): once more, on a connection of its own.
            async with aiohttp.ClientSession() as fresh, fresh.get(url) as resp:
                text = await resp.text()
        return parse(text, tuple(names) or None)


class ErrorEvents:
    """The error events of a stream (``data: {"error": ...}``, which a relay
    sends after its 200 head when it has to stop), found without parsing
    every event: the marker cannot occur inside a content string, whose
    quotes are escaped. The bytes from the first one on are kept for its
    code."""

    MARKER = b'data: {"error"'

    def __init__(self) -> None:
        self.count = 0
        self._tail = b""
        self._kept = bytearray()

    def feed(self, data: bytes) -> None:
        width = len(self.MARKER) - 1
        # A marker cut in two by the chunks: in the last bytes of the one
        # before and the first of this one (it fits in neither alone).
        cut = (self._tail + data[:width]).find(self.MARKER)
        self.count += (cut >= 0) + data.count(self.MARKER)
        if self._kept:
            self._kept += data
        elif cut >= 0:
            self._kept += self._tail[cut:] + data
        elif (at := data.find(self.MARKER)) >= 0:
            self._kept += data[at:]
        self._tail = data[-width:] if len(data) >= width else (self._tail + data)[-width:]

    def code(self) -> str:
        """The first error event's ``error.code`` ("" when it says none)."""
        text = bytes(self._kept).removeprefix(b"data: ")
        return _error_code(text.split(b"\n", 1)[0].strip())


def _with_id(call: Call, headers: dict[str, str] | None) -> dict[str, str]:
    call.request_id = uuid.uuid4().hex
    return {"X-Request-Id": call.request_id, **(headers or {})}


def _error_code(body: bytes) -> str:
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return ""
    return str(error.get("code") or "") if isinstance(error, dict) else ""


def queue_wait(server_timing: str | None) -> float | None:
    """The ``queue`` metric of a ``Server-Timing`` header, in seconds."""
    for metric in (server_timing or "").split(","):
        name, *params = (part.strip() for part in metric.split(";"))
        if name == "queue":
            for param in params:
                key, _, value = param.partition("=")
                if key.strip() == "dur":
                    try:
                        return float(value) / 1000
                    except ValueError:
                        return None
    return None


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


async def closed_loop(
    users: int,
    seconds: float,
    call: Callable[[int], Awaitable[Call]],
    *,
    retry_after: bool = True,
) -> list[Call]:
    """``users`` closed-loop users for ``seconds``: each sends its next
    request when the previous one ended (after ``Retry-After`` when refused).
    Requests still running at the end are waited for. The calls are listed
    in the order they ended, so each user's stand in the order it sent them."""
    until = time.perf_counter() + seconds
    calls: list[Call] = []

    async def user(i: int) -> None:
        while time.perf_counter() < until:
            result = await call(i)
            result.user = i
            calls.append(result)
            if result.status != 200:
                pause = (result.retry_after or 1.0) if retry_after else 0.05
                await asyncio.sleep(max(0.0, min(pause, until - time.perf_counter())))

    await asyncio.gather(*(user(i) for i in range(users)))
    return calls


def tokens_within(calls: Iterable[Call], start: float, end: float) -> float:
    """Completion tokens generated between ``start`` and ``end``: each
    request's ``usage`` spread evenly from its first token (a non-streaming
    request: from its start) to its end."""
    tokens = 0.0
    for c in calls:
        if c.status != 200 or not c.completion_tokens:
            continue
        begin = c.first_token if c.first_token is not None and c.streamed else c.started
        span = c.finished - begin
        if span <= 0:
            tokens += c.completion_tokens if start <= begin <= end else 0
            continue
        overlap = min(c.finished, end) - max(begin, start)
        tokens += c.completion_tokens * max(0.0, overlap) / span
    return tokens


async def engine_idle(client: Client, engine_url: str, timeout: float = 120) -> None:
    """Wait until the engine runs and waits for nothing (at most ``timeout``
    seconds: an engine that never idles is measured as it is)."""
    deadline = time.monotonic() + timeout
    names = ("vllm:num_requests_running", "vllm:num_requests_waiting")
    while time.monotonic() < deadline:
        samples = await client.metrics(engine_url, names)
        if all(total(samples, n) == 0 for n in names):
            return
        await asyncio.sleep(0.2)
