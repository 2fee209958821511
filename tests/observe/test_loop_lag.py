"""The event-loop lag gauge shows a loop held up by work."""

import asyncio
import time

from prometheus_client import CollectorRegistry, Gauge

from app.observe.loop_lag import LoopLag


async def test_a_loop_blocked_for_a_while_shows_that_long_a_lag() -> None:
    registry = CollectorRegistry()
    gauge = Gauge("lag", "lag", registry=registry)
    lag = LoopLag(gauge, interval=0.05, window=60)
    task = asyncio.create_task(lag.run())
    try:
        await asyncio.sleep(0.2)  # a few ticks first: the timer is running
        time.sleep(0.4)  # noqa: ASYNC251 - work that holds the loop, on purpose
        await asyncio.sleep(0.2)
        # Due 0.05 s after its start, it ran 0.4 s later at the earliest.
        # Kept for the window: the ticks since, on time, do not hide it.
        assert (registry.get_sample_value("lag") or 0) >= 0.3
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
