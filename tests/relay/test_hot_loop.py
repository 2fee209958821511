"""What one relayed read of a stream runs of the gateway's own code: every
call into ``app.*`` the request's tasks make while the stream flows, per
read, in-process in front of a scripted engine (each chunk waits for the
client to have the one before it, so each is a read of its own). A
coroutine resumed counts as a call: the awaits from the ASGI entry down to
the relay's pump are most of the count, one each per read; the gateway's
background loops (the engines' scrapes, the dispatch) are not counted.

The relay's hot loop does only what the route's contract needs (the first
token's time, the usage at the end, an error event): a feature that adds
work per event — admission arithmetic, a parse of every chunk — raises the
count and fails here, whatever the machine's speed (no timing is asserted).
``-s`` prints the calls by function."""

import contextvars
import sys
import threading
from collections import Counter
from functools import partial
from types import FrameType
from typing import Any

from tests.support.asgi import Exchange, in_process_gateway
from tests.support.asgi_streams import open_stream
from tests.support.scripted_engine import DONE, chunk, usage_chunk

# Calls into app.* per relayed read: what the loop makes today.
MOST_PER_READ = 14.0
READS = 200

# Set before the request starts, so its tasks (and only they) see it.
_counting: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar(
    "counting", default=None
)


def sent(token: bytes, exchange: Exchange) -> bool:
    return token in exchange.body


async def calls_per_read() -> tuple[float, Counter[str]]:
    calls: Counter[str] = Counter()

    def note(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and (flag := _counting.get()) is not None and flag[0]:
            name = frame.f_globals.get("__name__", "")
            if name.startswith("app."):
                calls[f"{name}.{frame.f_code.co_qualname}"] += 1

    async with in_process_gateway() as gateway:
        flag = [False]
        _counting.set(flag)
        exchange, call = await open_stream(
            gateway, max_tokens=READS + 8, stream_options={"include_usage": True}
        )
        call.send(chunk("first"))
        await exchange.wait_for(lambda e: b'"first"' in e.body)
        sys.setprofile(note)
        threading.setprofile(note)
        flag[0] = True
        try:
            for i in range(READS):
                token = f"t{i}x"
                call.send(chunk(token))
                await exchange.wait_for(partial(sent, token.encode()))
        finally:
            flag[0] = False
            sys.setprofile(None)
            threading.setprofile(None)
        call.send(chunk("", "length") + usage_chunk(3, READS + 1) + DONE)
        call.end()
        await exchange.done()
        assert exchange.status == 200
    return sum(calls.values()) / READS, calls


async def test_a_relayed_read_runs_no_more_of_the_gateways_code_than_it_did() -> None:
    per_read, calls = await calls_per_read()
    for name, count in calls.most_common():
        print(f"{count / READS:6.2f}  {name}")
    print(f"{per_read:.2f} calls into app.* per read")
    # The stream really flowed through the relay.
    assert calls["app.relay.stream.StreamRelay.feed"] >= READS
    assert per_read <= MOST_PER_READ
