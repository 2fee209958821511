"""Graceful shutdown state, shared by the server runner and the app.

On SIGTERM the runner calls ``begin()``: readiness turns 503 and new (and
queued) requests are refused as ``draining``. In-flight requests get a grace
period; when it runs out the runner calls ``stop_streams()``, which calls
every stop callback registered by an open stream — each ends its stream
with a final SSE error event at once, whether or not the engine is sending —
and wakes non-streaming calls still waiting for the engine, which answer 503.
The coupling is this object alone: nothing watches the server's signal
handlers.
"""

import asyncio
from collections.abc import Callable

import anyio


class Drain:
    def __init__(self) -> None:
        self.draining = False
        self.stopping = False
        self._active = 0
        # asyncio events, not anyio's: the runner builds this object before
        # the event loop starts.
        self._idle = asyncio.Event()
        self._idle.set()
        self._listeners: list[Callable[[], None]] = []
        self._stoppers: set[Callable[[], None]] = set()

    @property
    def active(self) -> int:
        """Requests that reached a route and have not ended."""
        return self._active

    def enter(self) -> None:
        self._active += 1
        self._idle.clear()

    def leave(self) -> None:
        self._active -= 1
        if self._active == 0:
            self._idle.set()

    def on_begin(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def begin(self) -> None:
        self.draining = True
        for listener in self._listeners:
            listener()

    def on_stop(self, stopper: Callable[[], None]) -> Callable[[], None]:
        """Register what ends one open stream at the end of the grace period;
        returns the function that unregisters it. Registered after the stop,
        it is called at once."""
        if self.stopping:
            stopper()
            return lambda: None
        self._stoppers.add(stopper)
        return lambda: self._stoppers.discard(stopper)

    def stop_streams(self) -> None:
        self.stopping = True
        for stopper in list(self._stoppers):
            stopper()
        self._stoppers.clear()

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until no request is active; False if the timeout ran out first."""
        with anyio.move_on_after(timeout):
            await self._idle.wait()
            return True
        return False
