"""Streams through the in-process gateway (``tests.support.asgi``): one
opened against the scripted engine, and the events its client got."""

import json

from tests.support.asgi import Exchange, InProcessGateway
from tests.support.scripted_engine import MODEL, EngineCall

STREAM = {"model": MODEL, "prompt": "hello", "max_tokens": 16, "stream": True}


async def open_stream(gateway: InProcessGateway, **fields: object) -> tuple[Exchange, EngineCall]:
    """A stream the engine has answered with its headers, and the client got them."""
    exchange = gateway.request("/v1/completions", {**STREAM, **fields})
    call = await gateway.engine.calls.get()
    call.stream()
    await exchange.wait_for(lambda e: e.status == 200)
    return exchange, call


def events(exchange: Exchange) -> list[bytes]:
    return [event for event in exchange.body.split(b"\n\n") if event]


def final_error(exchange: Exchange) -> dict[str, object]:
    """The error of the stream's last event."""
    error: dict[str, object] = json.loads(events(exchange)[-1][6:])["error"]
    return error
