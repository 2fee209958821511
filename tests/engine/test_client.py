"""The engine client on its own: a kept-alive connection the engine closed
as a request went out is sent again once, and a broken connection is an
error another engine may not have, not proof that the engine is gone."""

import httpx
import pytest

from app.engine.client import EngineClient
from app.errors import UpstreamFailed
from app.settings import Settings
from tests.support.asgi import in_process_gateway
from tests.support.scripted_engine import MODEL, ScriptedEngine

ENGINE = "http://engine:8000"


def client_failing(times: int, error: type[httpx.TransportError]) -> tuple[EngineClient, list[int]]:
    """A client whose first ``times`` sends fail with ``error`` before any answer."""
    sends: list[int] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sends.append(len(sends))
        if len(sends) <= times:
            raise error("connection reset by peer", request=request)
        return httpx.Response(200, json={"choices": []})

    return EngineClient(Settings(), httpx.MockTransport(handle)), sends


@pytest.mark.parametrize("error", [httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError])
async def test_a_connection_closed_or_reset_before_any_answer_is_sent_again_once(
    error: type[httpx.TransportError],
) -> None:
    client, sends = client_failing(1, error)
    response = await client.open(ENGINE, "/v1/completions", b"{}", "id", stream=False)
    assert response.status_code == 200
    assert len(sends) == 2
    await response.aclose()
    await client.aclose()


async def test_twice_is_a_broken_engine_connection_that_does_not_eject() -> None:
    client, sends = client_failing(2, httpx.ReadError)
    with pytest.raises(UpstreamFailed) as failed:
        await client.open(ENGINE, "/v1/completions", b"{}", "id", stream=False)
    assert len(sends) == 2
    assert failed.value.retryable
    assert not failed.value.ejects
    await client.aclose()


async def test_an_engine_that_breaks_a_request_stays_in_routing() -> None:
    engine = ScriptedEngine(completion_error=httpx.ReadError("connection reset by peer"))
    async with in_process_gateway(engine) as gateway:
        exchange = gateway.request("/v1/completions", {"model": MODEL, "prompt": "hi"})
        await exchange.done()
        assert exchange.status == 502
        assert gateway.metric("gateway_engine_ejections_total") == 0
        assert gateway.metric("gateway_upstream_up") == 1
        assert gateway.settled()
