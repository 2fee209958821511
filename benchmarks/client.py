"""A measuring streaming client for the benchmarks (not a test helper: it
records what a user would see — status, time to first token, tokens)."""

import time
from dataclasses import dataclass
from typing import Any

import httpx

from loadtests.meter import StreamMeter


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
        meter = StreamMeter(started=result.started)
        async for raw in response.aiter_raw():
            meter.feed(raw, time.perf_counter())
    result.finished = time.perf_counter()
    result.first_token = meter.first_token
    result.completion_tokens = meter.tokens
    return result
