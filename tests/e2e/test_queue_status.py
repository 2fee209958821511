"""Queue status against the real engine (``X-Queue-Status: on``): one
sequence at a time is admitted, a long stream holds it, and a second stream
waits in the gateway's queue, told its place while it waits. Refused at
its deadline, it gets the SSE error event with the wait; admitted, the
OpenAI SDK reads the stream as if no comment had come."""

import asyncio
import json
import re
from collections.abc import Iterator

import httpx
import pytest
from openai import AsyncOpenAI

from tests.support.engines import MODEL, Engine
from tests.support.gateways import Gateway, StartGateway, access_log, running_gateway
from tests.support.streams import open_stream
from tests.support.wait import wait_until

INTERVAL = 0.2
# One sequence of the tiny model runs at most ~700 tokens/s here: a holder
# of 1,900 tokens runs for more than 2.5 s, past a 1 s deadline in the queue.
HOLDER = {"model": MODEL, "max_tokens": 1900, "ignore_eos": True, "prompt": "Hold"}
QUEUE_TIMEOUT = 1.0


@pytest.fixture(scope="module")
def one_at_a_time(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    settings: dict[str, object] = {
        "max_concurrency": 1,
        "queue_timeout": QUEUE_TIMEOUT,
        "queue_status_interval": INTERVAL,
    }
    log_dir = tmp_path_factory.mktemp("queue-status")
    with running_gateway(log_dir, engine.url, settings) as gateway:
        yield gateway


async def test_a_queued_stream_is_told_its_place_then_refused_with_the_wait(
    idle_engine: Engine, one_at_a_time: Gateway
) -> None:
    async with (
        httpx.AsyncClient(base_url=one_at_a_time.url, timeout=60) as http,
        open_stream(http, HOLDER) as holder,
    ):
        assert holder.status_code == 200
        body = {"model": MODEL, "prompt": "Wait", "max_tokens": 50}
        async with open_stream(http, body, **{"x-queue-status": "on"}) as queued:
            # The head came before admission.
            assert queued.status_code == 200
            raw = b"".join([part async for part in queued.aiter_raw()])
    events = [e for e in raw.split(b"\n\n") if e]
    told = [e for e in events if e.startswith(b": queued ")]
    assert len(told) >= 2
    assert all(re.match(rb": queued position=1 eta_s=\d+\.\d$", e) for e in told)
    assert events[-1].startswith(b"data: {")
    error = json.loads(events[-1][len(b"data: ") :])["error"]
    assert error["code"] == "over_capacity"
    assert error["retry_after"] >= 1
    assert not [e for e in events if e.startswith(b"data:") and e is not events[-1]]


async def test_the_openai_sdk_reads_a_stream_that_was_told_its_place(
    idle_engine: Engine, start_gateway: StartGateway
) -> None:
    one_at_a_time = start_gateway(
        idle_engine.url, max_concurrency=1, queue_status_interval=INTERVAL
    )
    one_at_a_time.process.wait_http(f"{one_at_a_time.url}/health/ready", timeout=60)
    # At least 1.2 s alone: the queued stream is told its place several times.
    short = {**HOLDER, "max_tokens": 900}
    async with (
        httpx.AsyncClient(base_url=one_at_a_time.url, timeout=60) as http,
        open_stream(http, short) as holder,
        AsyncOpenAI(
            base_url=f"{one_at_a_time.url}/v1", api_key="none", max_retries=0, timeout=60
        ) as api,
    ):
        assert holder.status_code == 200
        # Read to its end meanwhile: it ends, and the queued stream goes in.
        reading = asyncio.create_task(holder.aread())
        stream = await api.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "After the wait"}],
            max_tokens=10,
            stream=True,
            extra_headers={"X-Queue-Status": "on", "X-Request-Id": "told-its-place"},
            extra_body={"ignore_eos": True},
        )
        pieces = [chunk async for chunk in stream]
        await reading
    assert pieces[-1].choices[0].finish_reason == "length"
    assert sum(1 for p in pieces if p.choices and p.choices[0].delta.content is not None) >= 10

    def line() -> list[dict[str, object]]:
        return [e for e in access_log(one_at_a_time) if e.get("request_id") == "told-its-place"]

    assert wait_until(lambda: bool(line()), timeout=30)
    (logged,) = line()
    assert logged["outcome"] == "completed"
    # It waited long enough to be told its place more than once.
    queue_s = logged["queue_s"]
    assert isinstance(queue_s, float)
    assert queue_s >= 2 * INTERVAL
