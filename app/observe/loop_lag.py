"""How late the gateway's event loop runs: a wait every request shares.

Every half second a timer is due; how much later than due it runs is time
the loop spent on other work, or the process waited for a core — and every
stream's next byte, every admission and every health check waited as long.
``gateway_event_loop_lag_seconds`` is the longest such lag of the last 30
seconds (a gauge a scrape every 15 or 30 s does not miss a spike in). Read
beside ``gateway_first_event_added_seconds``: lag high while that stays low
means requests wait before the gateway reads their bytes (CPU contention,
too much work for one process: run more), not in its relay.
"""

import asyncio
from collections import deque

from prometheus_client import Gauge

_INTERVAL = 0.5
_WINDOW = 30.0


class LoopLag:
    def __init__(self, gauge: Gauge, interval: float = _INTERVAL, window: float = _WINDOW) -> None:
        self._gauge = gauge
        self._interval = interval
        self._lags: deque[float] = deque(maxlen=max(1, round(window / interval)))

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self._interval
            await asyncio.sleep(self._interval)
            self._lags.append(max(0.0, loop.time() - due))
            self._gauge.set(max(self._lags))
