"""Engine calls under way, and a wait for the ones under way now.

A stream's call is under way from the moment an admitted request starts
it until the engine answers it (its status and headers: vLLM sends them once
it has taken the request in) or the call fails. A call for a whole answer is
not counted: its head comes with its end. ``answered`` waits for the calls
under way when it is called, not for calls started after it, so a steady
stream of calls cannot keep a waiter waiting; and at most ``within``
seconds, so a call that hangs holds nobody for long.

Why it exists (``app.request.pipeline``): a burst's requests arrive in one pass of
the event loop, and each runs its intake — the body read, checked and
counted, then admission — up to its first real wait before the loop polls
its sockets again. The engine calls of the requests admitted first wait on
their connections, which complete at the next poll: behind the intake of
the whole burst, requests that can only queue included. A request that
arrives while others queue has nothing to gain from an early intake, so it
first lets the calls under way go out.
"""

from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

import anyio

# The longest a request waits for the calls under way. The engine answers a
# call once it has taken it in, within its intake of the calls ahead (a
# burst's first batch of 128: a few hundred milliseconds here); one that
# hangs must not hold the intake of others longer.
TRANSIT_WAIT_SECONDS = 0.5


class _Cohort:
    """Calls started between two waiters: a waiter waits for its cohort and
    every one before it."""

    def __init__(self) -> None:
        self.calls = 0
        self.answered: anyio.Event | None = None


class Transit:
    def __init__(self) -> None:
        # Oldest first; the last one takes new calls unless a waiter closed it.
        self._cohorts: deque[_Cohort] = deque()
        self._open: _Cohort | None = None

    @property
    def under_way(self) -> int:
        return sum(cohort.calls for cohort in self._cohorts)

    @property
    def waiting(self) -> bool:
        """Whether anyone waits for calls under way."""
        return any(cohort.answered is not None for cohort in self._cohorts)

    @contextmanager
    def calling(self) -> Iterator[None]:
        """An engine call, under way inside the block."""
        cohort = self._open
        if cohort is None:
            cohort = self._open = _Cohort()
            self._cohorts.append(cohort)
        cohort.calls += 1
        try:
            yield
        finally:
            cohort.calls -= 1
            self._settle()

    async def answered(self, within: float) -> None:
        """Return once the calls under way now have been answered or have
        failed, or after ``within`` seconds."""
        if not self._cohorts:
            return
        last = self._cohorts[-1]
        if last.answered is None:
            last.answered = anyio.Event()
        # Calls from now on are not this waiter's to wait for.
        self._open = None
        with anyio.move_on_after(within):
            await last.answered.wait()

    def _settle(self) -> None:
        """Let go of the oldest cohorts whose calls are all answered."""
        while self._cohorts and self._cohorts[0].calls == 0:
            cohort = self._cohorts.popleft()
            if cohort is self._open:
                self._open = None
            if cohort.answered is not None:
                cohort.answered.set()
