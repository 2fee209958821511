"""How the load is sent: closed-loop users (each sends its next request when
its last one ended, after a think time, or after ``Retry-After`` when
refused) and open-loop Poisson arrivals (sent on a schedule whatever the
target does), both inside a window: nothing is sent after the schedule, and
what still runs when the window closes is cut (the client leaves; the
request is a miss).

The arrival schedule is made from a seed alone, so every target of a round
gets the very same requests at the very same offsets."""

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from benchmarks.classes.outcomes import CUT
from benchmarks.harness import Call

Send = Callable[[], Awaitable[Call]]


async def within(deadline: float, send: Send) -> Call:
    """``send``, cut at ``deadline`` (``time.perf_counter``) if still running."""
    started = time.perf_counter()
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout_at(loop.time() + (deadline - started)):
            return await send()
    except TimeoutError:
        return Call(status=CUT, started=started, finished=time.perf_counter())


@dataclass(frozen=True)
class User:
    """A closed-loop user: what it sends, as which kind, and how long it
    thinks between an answer and its next request."""

    label: str
    send: Send
    think: float = 0.0


async def closed_loop(
    users: Sequence[User], t0: float, load_s: float, window_s: float
) -> list[Call]:
    """Every user from ``t0`` until ``t0 + load_s``; a refused user comes
    back after ``Retry-After`` (1 s when it says none), as a client that
    honours it does. Requests still running at ``t0 + window_s`` are cut."""
    stop, cut = t0 + load_s, t0 + window_s
    calls: list[Call] = []

    async def run(i: int, user: User) -> None:
        while time.perf_counter() < stop:
            call = await within(cut, user.send)
            call.user, call.label = i, user.label
            calls.append(call)
            pause = user.think
            if call.status == 429:
                pause = call.retry_after or 1.0
            elif call.status != 200:
                # A failure answered at once is not tried again in a spin.
                pause = max(user.think, 0.1)
            await asyncio.sleep(max(0.0, min(pause, stop - time.perf_counter())))

    await asyncio.gather(*(run(i, u) for i, u in enumerate(users)))
    return calls


@dataclass(frozen=True)
class Arrival:
    """One open-loop request: when it is sent (seconds after the start) and
    as which kind."""

    at: float
    label: str


def poisson_arrivals(
    rate: float, seconds: float, shares: Sequence[tuple[str, float]], seed: int
) -> list[Arrival]:
    """Arrivals at ``rate`` a second on average (exponential gaps) for
    ``seconds``; each one's kind drawn by ``shares`` (label, share; the
    shares add up to 1)."""
    rng = random.Random(seed)
    arrivals: list[Arrival] = []
    at = rng.expovariate(rate) if rate > 0 else seconds
    while at < seconds:
        draw, label = rng.random(), shares[-1][0]
        for name, share in shares:
            if draw < share:
                label = name
                break
            draw -= share
        arrivals.append(Arrival(at, label))
        at += rng.expovariate(rate)
    return arrivals


async def open_loop(
    arrivals: Sequence[Arrival], senders: dict[str, Send], t0: float, window_s: float
) -> list[Call]:
    """Each arrival sent at ``t0`` + its offset, whatever came of the ones
    before; requests still running at ``t0 + window_s`` are cut."""
    cut = t0 + window_s
    tasks: list[asyncio.Task[Call]] = []

    async def one(i: int, arrival: Arrival) -> Call:
        call = await within(cut, senders[arrival.label])
        call.user, call.label = i, arrival.label
        return call

    for i, arrival in enumerate(arrivals):
        await asyncio.sleep(max(0.0, t0 + arrival.at - time.perf_counter()))
        tasks.append(asyncio.create_task(one(i, arrival)))
    return list(await asyncio.gather(*tasks))
