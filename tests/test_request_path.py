"""How many of ``app/``'s modules one streamed request runs code in: a
completion streamed through the in-process gateway (default settings, the
prompt counted by the engine's ``/tokenize``) in front of a scripted engine,
after a first request has warmed everything up. Only the tasks serving the
request count (its own and the ones it starts), not the gateway's
background loops.

The bound is what the path crosses today: a change that makes one request
run through more modules moves it on purpose (``-s`` prints the list)."""

import asyncio
import contextvars
import sys
import threading
from types import FrameType
from typing import Any

from tests.support.asgi import InProcessGateway, in_process_gateway
from tests.support.scripted_engine import DONE, MODEL, chunk, usage_chunk

MOST = 56

_serving = contextvars.ContextVar("serving", default=False)


async def _engine(gateway: InProcessGateway) -> None:
    while True:
        call = await gateway.engine.calls.get()
        if call.path.endswith("/tokenize"):
            call.answer(200, {"count": 3, "tokens": [1, 2, 3], "max_model_len": 2048})
            continue
        call.stream()
        for i in range(8):
            call.send(chunk(f" t{i}"))
        call.send(chunk("", "length"))
        call.send(usage_chunk(3, 8))
        call.send(DONE)
        call.end()


async def _stream(gateway: InProcessGateway) -> None:
    body = {
        "model": MODEL,
        "prompt": "hello",
        "max_tokens": 8,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    exchange = gateway.request("/v1/completions", body)
    await exchange.wait_for(lambda e: b"[DONE]" in e.body)


async def modules_one_stream_runs() -> set[str]:
    seen: set[str] = set()

    def note(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and _serving.get():
            name = frame.f_globals.get("__name__", "")
            if name.startswith("app."):
                seen.add(name)

    async with in_process_gateway(prompt_tokens="auto") as gateway:
        engine = asyncio.create_task(_engine(gateway))
        try:
            await _stream(gateway)
            sys.setprofile(note)
            threading.setprofile(note)
            token = _serving.set(True)
            try:
                await _stream(gateway)
            finally:
                _serving.reset(token)
                sys.setprofile(None)
                threading.setprofile(None)
        finally:
            engine.cancel()
    return seen


async def test_one_streamed_request_runs_code_in_no_more_modules_than_it_did() -> None:
    seen = await modules_one_stream_runs()
    print("\n".join(sorted(seen)), f"\n{len(seen)} modules")
    # The request really went through: its route, relay and admission ran.
    assert {"app.request.pipeline", "app.relay.stream", "app.admission.policy"} <= seen
    assert len(seen) <= MOST
