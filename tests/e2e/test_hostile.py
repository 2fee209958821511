"""A hostile client against a real gateway (admission on) and the real engine:
every request gets its documented status, an OpenAI-shaped error and exactly
one recorded outcome; nothing is left queued, in flight or reserved."""

import asyncio
import json
import random
from collections.abc import Iterator

import httpx
import pytest

from tests.support.engines import MODEL, Engine, engine_idle
from tests.support.gateways import Gateway, StartGateway, access_log, running_gateway
from tests.support.raw_http import close, connect, read_response, request_bytes
from tests.support.wait import wait_until

COMPLETIONS = "/v1/completions"
OUTCOMES = ("completed", "rejected", "cancelled", "failed")


@pytest.fixture(scope="module")
def hostile_gateway(engine: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with running_gateway(tmp_path_factory.mktemp("hostile"), engine.url, {}) as gateway:
        yield gateway


def outcomes(gateway: Gateway) -> dict[str, float]:
    return {o: gateway.metric("gateway_requests_total", outcome=o) for o in OUTCOMES}


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {o: after[o] - before[o] for o in OUTCOMES}


def settled(gateway: Gateway) -> bool:
    return (
        gateway.metric("gateway_queue_depth") == 0
        and gateway.metric("gateway_requests_in_flight") == 0
        and gateway.metric("gateway_kv_tokens_reserved") == 0
    )


ONE_REJECTION = {**dict.fromkeys(OUTCOMES, 0.0), "rejected": 1.0}


REFUSED = [
    (
        "deeply nested",
        b'{"model": "tiny", "prompt": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
        400,
        "nested",
    ),
    (
        "lone surrogate",
        b'{"model": "tiny", "prompt": "\\ud800 hi", "max_tokens": 5}',
        400,
        "surrogate",
    ),
    (
        "prompt of 50k tokens",
        json.dumps({"model": MODEL, "prompt": "word " * 50_000, "max_tokens": 5}).encode(),
        400,
        "context",
    ),
    (
        "token ids over the context",
        json.dumps({"model": MODEL, "prompt": [7] * 2100, "max_tokens": 5}).encode(),
        400,
        "context",
    ),
    (
        "n whose smallest demand exceeds the cache",
        json.dumps({"model": MODEL, "prompt": [7] * 300, "max_tokens": 5, "n": 16}).encode(),
        400,
        "cache",
    ),
    (
        "a batch over the limit",
        json.dumps({"model": MODEL, "prompt": ["hi"] * 33, "max_tokens": 5}).encode(),
        400,
        "batch",
    ),
]


@pytest.mark.parametrize(
    ("name", "raw", "status", "words"), REFUSED, ids=[case[0] for case in REFUSED]
)
async def test_what_can_never_run_is_refused_up_front(
    hostile_gateway: Gateway, name: str, raw: bytes, status: int, words: str
) -> None:
    before = outcomes(hostile_gateway)
    async with httpx.AsyncClient(base_url=hostile_gateway.url, timeout=60) as http:
        response = await http.post(
            COMPLETIONS, content=raw, headers={"content-type": "application/json"}
        )
    assert response.status_code == status, response.text
    assert "retry-after" not in response.headers
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert words in error["message"]
    assert delta(outcomes(hostile_gateway), before) == ONE_REJECTION


async def test_a_batch_runs_as_its_sequences(hostile_gateway: Gateway) -> None:
    body = {"model": MODEL, "prompt": ["a b", "c d", "e f"], "n": 2, "max_tokens": 3}
    async with httpx.AsyncClient(base_url=hostile_gateway.url, timeout=60) as http:
        response = await http.post(COMPLETIONS, json={**body, "ignore_eos": True})
    assert response.status_code == 200
    assert len(response.json()["choices"]) == 6
    assert wait_until(lambda: settled(hostile_gateway), timeout=10)


async def test_an_abandoned_upload_is_one_cancellation(hostile_gateway: Gateway) -> None:
    before = outcomes(hostile_gateway)
    receiving = hostile_gateway.metric("gateway_cancellations_total", phase="receiving")
    head, body = request_bytes(COMPLETIONS, {"model": MODEL, "prompt": "x" * 900})
    for _ in range(20):
        _reader, writer = await connect(hostile_gateway.url)
        writer.write(head + body[: len(body) // 2])
        await writer.drain()
        await close(writer)
    cancelled = {**dict.fromkeys(OUTCOMES, 0.0), "cancelled": 20.0}
    assert await asyncio.to_thread(
        wait_until, lambda: delta(outcomes(hostile_gateway), before) == cancelled, 30
    )
    assert (
        hostile_gateway.metric("gateway_cancellations_total", phase="receiving") == receiving + 20
    )
    assert "Traceback" not in hostile_gateway.process.log_text()


async def test_http_1_0_gets_no_chunked_stream(hostile_gateway: Gateway) -> None:
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 3, "ignore_eos": True}
    reader, writer = await connect(hostile_gateway.url)
    writer.write(b"".join(request_bytes(COMPLETIONS, {**body, "stream": True}, version="1.0")))
    status, headers, content = await read_response(reader)
    await close(writer)
    assert status == 400
    assert json.loads(content)["error"]["param"] == "stream"

    reader, writer = await connect(hostile_gateway.url)
    writer.write(b"".join(request_bytes(COMPLETIONS, body, version="1.0")))
    status, headers, content = await read_response(reader)
    await close(writer)
    assert status == 200
    assert "chunked" not in headers.get("transfer-encoding", "")
    assert json.loads(content)["usage"]["completion_tokens"] == 3


async def test_pipelined_requests_are_answered_in_order(hostile_gateway: Gateway) -> None:
    before = outcomes(hostile_gateway)
    first = {"model": MODEL, "prompt": "one", "max_tokens": 4, "ignore_eos": True}
    second = {**first, "prompt": "two", "max_tokens": 2}
    reader, writer = await connect(hostile_gateway.url)
    writer.write(b"".join(request_bytes(COMPLETIONS, first) + request_bytes(COMPLETIONS, second)))
    replies = [await read_response(reader) for _ in range(2)]
    await close(writer)
    assert [status for status, _, _ in replies] == [200, 200]
    tokens = [json.loads(content)["usage"]["completion_tokens"] for _, _, content in replies]
    assert tokens == [4, 2]
    assert delta(outcomes(hostile_gateway), before)["completed"] == 2


async def test_a_disconnect_storm_leaves_exactly_one_outcome_per_request(
    idle_engine: Engine, start_gateway: StartGateway
) -> None:
    """300 clients send a request — whole, or cut off mid-body — and leave
    within 60 ms. Every request whose head the client finished sending ends
    in exactly one outcome; the engine is idle afterwards."""
    gateway = start_gateway(idle_engine.url)
    gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)
    rng = random.Random(7)
    body = {"model": MODEL, "prompt": "storm", "max_tokens": 300, "ignore_eos": True}
    heads_sent = 0

    async def one(i: int) -> None:
        nonlocal heads_sent
        head, raw = request_bytes(COMPLETIONS, {**body, "stream": i % 2 == 0})
        _reader, writer = await connect(gateway.url)
        cut = len(raw) // 2 if i % 3 == 0 else len(raw)
        writer.write(head)
        await writer.drain()
        heads_sent += 1
        writer.write(raw[:cut])
        await writer.drain()
        await asyncio.sleep(rng.uniform(0, 0.06))
        await close(writer)

    await asyncio.gather(*(one(i) for i in range(300)))
    assert heads_sent == 300

    def counted() -> float:
        return sum(outcomes(gateway).values())

    assert await asyncio.to_thread(wait_until, lambda: counted() == heads_sent, 60), counted()
    assert await asyncio.to_thread(wait_until, lambda: settled(gateway), 30)
    assert await asyncio.to_thread(wait_until, lambda: engine_idle(idle_engine.metric), 30)
    assert outcomes(gateway)["failed"] == 0
    assert "Traceback" not in gateway.process.log_text()
    assert len(access_log(gateway)) == heads_sent
