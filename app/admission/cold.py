"""Scale from zero: requests held while an engine starts for their model.

A request for a cold model (``GATEWAY_COLD_MODELS``) that no engine up
serves waits in the queue like any other, keeping its place in the order,
but on a budget of its own (``GATEWAY_COLD_START_TIMEOUT``) rather than its
objective: counted from the later of its arrival and the pool's last change
(an engine found, lost, up or down), so an engine that dies while loading
gives the requests waiting for it a new budget. Once an engine serves the
model, its objective counts again, less the time it was held: a cold start
is not the queue's delay. Past the budget, it is refused with a
``Retry-After`` from how long engines took to come up here.

Pure, as the policy is: the clock comes in as ``now``.
"""

from collections import Counter
from collections.abc import Callable, Iterable

from app.admission.fairqueue import Waiter

# Kept of each model's last cold starts, for the next Retry-After.
_KEPT = 5


class ColdStarts:
    def __init__(self, models: Iterable[str] = (), timeout: float = 0.0) -> None:
        self.models = frozenset(models)
        self.timeout = timeout
        self.changed_at = float("-inf")
        # Since when each model has had requests held and no engine (the
        # start being waited for), and what its last starts took.
        self._since: dict[str, float] = {}
        self._took: dict[str, list[float]] = {}
        # Starts measured since the last ``take_measured`` (for the histogram).
        self._measured: list[tuple[str, float]] = []

    def holds(self, model: str) -> bool:
        """Whether a request for ``model`` is held while no engine serves it."""
        return self.timeout > 0 and model in self.models

    def hold(self, waiter: Waiter, now: float) -> None:
        waiter.held_from = now
        self._since.setdefault(waiter.model, now)

    def time_left(self, waiter: Waiter, now: float) -> float:
        """Seconds a held ``waiter`` may still wait for an engine."""
        return max(waiter.arrival, self.changed_at) + self.timeout - now

    def pool_changed(
        self, now: float, served: Callable[[str], bool], waiters: Iterable[Waiter]
    ) -> list[Waiter]:
        """The engines changed: a held waiter whose model an engine now
        serves is held no more (its deadline moves by the time it was held:
        returned, to take its place again in its tenant's order); one whose
        engine went is held from now; a start waited for that came is
        measured."""
        self.changed_at = now
        released = []
        for waiter in list(waiters):
            if waiter.held_from is None:
                if self.holds(waiter.model) and not served(waiter.model):
                    self.hold(waiter, now)
            elif served(waiter.model):
                waiter.deadline += now - waiter.held_from
                waiter.held_from = None
                released.append(waiter)
        for model in [m for m in self._since if served(m)]:
            took = now - self._since.pop(model)
            self._took[model] = [*self._took.get(model, ()), took][-_KEPT:]
            self._measured.append((model, took))
        return released

    def retry_after(self, model: str, now: float, unknown: float) -> float:
        """When an engine for ``model`` should be up: the slowest of its last
        starts, less how long the one under way has run (at least 1 s);
        ``unknown`` before any start was seen."""
        took = self._took.get(model)
        if not took:
            return unknown
        return max(1.0, max(took) - (now - self._since.get(model, now)))

    def held(self, waiters: Iterable[Waiter]) -> Counter[str]:
        """The requests held now, by model."""
        return Counter(w.model for w in waiters if w.held_from is not None)

    def take_measured(self) -> list[tuple[str, float]]:
        measured, self._measured = self._measured, []
        return measured

    def last_starts(self) -> dict[str, list[float]]:
        return {model: [round(t, 3) for t in took] for model, took in self._took.items()}
