"""Retry-After by value, in-process (``tests.support.asgi``): a refused
client that comes back when it chooses, and whether its request is admitted
then. The scripted engine answers an admitted request at once."""

import asyncio
import time
from typing import Any

from tests.support.asgi import Exchange, InProcessGateway
from tests.support.scripted_engine import EngineCall

COMPLETIONS = "/v1/completions"


async def sleep_until(moment: float) -> None:
    await asyncio.sleep(max(0.0, moment - time.monotonic()))


def answer(call: EngineCall, body: dict[str, Any]) -> None:
    """The engine's answer: every token the request may write."""
    usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": body["max_tokens"]}
    call.answer(200, {"choices": [{"index": 0, "text": "x"}], "usage": usage})


async def admitted(
    gateway: InProcessGateway, body: dict[str, Any], headers: dict[str, str]
) -> bool:
    """Whether a request is admitted — it reaches the engine, which answers
    it at once — or refused."""
    exchange = gateway.request(COMPLETIONS, body, headers=headers)
    call = asyncio.ensure_future(gateway.engine.calls.get())
    done, _ = await asyncio.wait(
        {call, exchange.task}, timeout=30, return_when=asyncio.FIRST_COMPLETED
    )
    assert done, "neither admitted nor refused in 30 s"
    if not call.done():
        call.cancel()
        await exchange.done()
        assert exchange.status == 429, exchange.body
        return False
    answer(call.result(), body)
    await exchange.done()
    assert exchange.status == 200, exchange.body
    return True


def told(exchange: Exchange) -> int:
    assert exchange.status == 429, exchange.body
    return int(exchange.headers["retry-after"])
