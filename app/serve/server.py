"""Running the app under uvicorn with a drain before shutdown.

uvicorn stops accepting connections as soon as it gets SIGTERM and never
tells open streams to end. A gateway behind a load balancer should instead
keep answering for a moment (503 ``draining``, readiness 503) while work in
flight finishes. So the first SIGTERM or SIGINT starts a drain, and uvicorn's
own shutdown begins only when the drain is over; a second signal skips the
rest of the drain.
"""

import asyncio
import logging
from types import FrameType

import uvicorn

from app.serve.drain import Drain

log = logging.getLogger("gateway")

# After the grace period, how long ended streams get to send their final event.
_STOP_WAIT = 2.0


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, drain: Drain, grace_seconds: float) -> None:
        super().__init__(config)
        self._drain = drain
        self._grace = grace_seconds
        self._drain_requested = False
        self._drain_task: asyncio.Task[None] | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._drain_requested:
            super().handle_exit(sig, frame)
            return
        # A signal handler: only set flags here, the drain runs in on_tick.
        self._drain_requested = True
        self._drain.draining = True

    async def on_tick(self, counter: int) -> bool:
        if self._drain_requested:
            if self._drain_task is None:
                self._drain_task = asyncio.create_task(self._run_drain())
            if self._drain_task.done():
                return True
        return await super().on_tick(counter)

    async def _run_drain(self) -> None:
        drain = self._drain
        log.warning("draining: %d request(s) in flight, grace %.1fs", drain.active, self._grace)
        drain.begin()
        if await drain.wait_idle(self._grace):
            log.warning("drained; shutting down")
            return
        log.warning("grace period over; ending %d open request(s)", drain.active)
        drain.stop_streams()
        await drain.wait_idle(_STOP_WAIT)
