"""The relay when the upstream misbehaves (a fake engine: see tests/support/fake_engine.py)."""

import json
from collections.abc import Iterator

import httpx
import pytest

from deploy.local import free_port
from tests.support.fake_engine import QUEUE_FULL, FakeEngine, awkward_stream
from tests.support.gateways import Gateway, StartGateway
from tests.support.wait import wait_until


@pytest.fixture
def fake() -> Iterator[FakeEngine]:
    engine = FakeEngine(free_port())
    engine.start()
    yield engine
    engine.stop()


@pytest.fixture
def gateway(fake: FakeEngine, start_gateway: StartGateway) -> Gateway:
    gateway = start_gateway(
        fake.url, admission="off", upstream_read_timeout=1, upstream_non_stream_timeout=1
    )
    gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=30)
    return gateway


def stream_body(model: str) -> dict[str, object]:
    return {"model": model, "prompt": "x", "max_tokens": 10, "stream": True}


async def post_stream(gateway: Gateway, model: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as http:
        return await http.post("/v1/completions", json=stream_body(model))


def events(content: bytes) -> list[bytes]:
    return [event for event in content.split(b"\n\n") if event]


async def test_event_bytes_pass_through_byte_identical(gateway: Gateway) -> None:
    """U+2028, U+2029 and U+0085 inside JSON strings, events split across
    reads and several in one read: the client gets exactly the engine's bytes."""
    response = await post_stream(gateway, "awkward")
    assert response.status_code == 200
    assert response.content == b"".join(awkward_stream())


async def test_engine_dying_mid_stream_ends_with_one_error_event(gateway: Gateway) -> None:
    failed = gateway.metric("gateway_requests_total", outcome="failed")
    response = await post_stream(gateway, "dies")
    received = events(response.content)
    assert [json.loads(e[6:])["choices"][0]["text"] for e in received[:3]] == [
        "token0",
        "token1",
        "token2",
    ]
    # The half-sent event is dropped; the stream ends with the error.
    assert len(received) == 4
    error = json.loads(received[3][6:])["error"]
    assert error["code"] == "engine_error"
    assert gateway.metric("gateway_requests_total", outcome="failed") == failed + 1


async def test_a_stall_mid_stream_ends_at_the_idle_timeout(gateway: Gateway) -> None:
    response = await post_stream(gateway, "stalls")
    received = events(response.content)
    assert len(received) == 2
    assert json.loads(received[1][6:])["error"]["code"] == "engine_timeout"


async def test_a_stream_without_done_is_reported(gateway: Gateway) -> None:
    received = events((await post_stream(gateway, "no-done")).content)
    assert json.loads(received[-1][6:])["error"]["code"] == "engine_error"


@pytest.mark.parametrize("stream", [True, False])
async def test_a_stall_before_headers_is_a_504(gateway: Gateway, stream: bool) -> None:
    body = {**stream_body("stalls-before-headers"), "stream": stream}
    async with httpx.AsyncClient(base_url=gateway.url, timeout=30) as http:
        response = await http.post("/v1/completions", json=body)
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "engine_timeout"


async def test_an_engine_503_is_passed_on_with_retry_after(gateway: Gateway) -> None:
    """vLLM's queue-full 503 carries no Retry-After: the gateway adds its own,
    GATEWAY_RETRY_AFTER_UNAVAILABLE (default 5 s)."""
    response = await post_stream(gateway, "busy")
    assert response.status_code == 503
    assert response.headers["retry-after"] == "5"
    assert response.json() == QUEUE_FULL


async def test_readiness_follows_the_engine(fake: FakeEngine, gateway: Gateway) -> None:
    def ready(path: str = "/health/ready") -> int:
        return httpx.get(f"{gateway.url}{path}", timeout=5).status_code

    assert ready() == 200
    fake.stop()
    assert wait_until(lambda: ready() == 503, timeout=10)
    assert gateway.metric("gateway_upstream_up") == 0
    response = await post_stream(gateway, "awkward")
    assert response.status_code == 503
    assert int(response.headers["retry-after"]) >= 1
    assert ready("/health/live") == 200

    fake.start()
    assert wait_until(lambda: ready() == 200, timeout=10)
    assert (await post_stream(gateway, "awkward")).status_code == 200
