"""A measuring streaming client for the benchmarks (not a test helper: it
records what a user would see — status, time to first token, tokens)."""

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass
class Result:
    status: int
    started: float
    first_token: float | None = None
    finished: float | None = None
    completion_tokens: int = 0
    retry_after: float | None = None

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.started


async def stream_chat(
    http: httpx.AsyncClient, body: dict[str, Any], headers: dict[str, str] | None = None
) -> Result:
    """One streaming chat completion; usage is requested to count tokens."""
    payload = {**body, "stream": True, "stream_options": {"include_usage": True}}
    result = Result(status=0, started=time.perf_counter())
    async with http.stream(
        "POST", "/v1/chat/completions", json=payload, headers=headers
    ) as response:
        result.status = response.status_code
        if response.status_code != 200:
            await response.aread()
            if "retry-after" in response.headers:
                result.retry_after = float(response.headers["retry-after"])
            result.finished = time.perf_counter()
            return result
        buffer = b""
        async for raw in response.aiter_raw():
            buffer += raw
            *events, buffer = buffer.split(b"\n\n")
            for event in events:
                _read_event(event, result)
    result.finished = time.perf_counter()
    return result


def _read_event(event: bytes, result: Result) -> None:
    if not event.startswith(b"data: {"):
        return
    chunk = json.loads(event[6:])
    if result.first_token is None:
        for choice in chunk.get("choices") or ():
            if (choice.get("delta") or {}).get("content"):
                result.first_token = time.perf_counter()
    usage = chunk.get("usage")
    if usage:
        result.completion_tokens = usage["completion_tokens"]
