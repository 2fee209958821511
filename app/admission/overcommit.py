"""How far one engine's KV budget may overcommit it: a factor on what it can
hold, adapted once a tick of the engine's facts. No I/O, no clock.

Additive increase while requests wait and the engine has room to spare,
multiplicative decrease when preemption costs more than it may. What it
may cost is the preemption budget: the share of what the engine generates
that it computes again after preemptions (``app.admission.recompute``). At
0 any preemption backs off, and the factor stays at what completed
requests justify (their reservations over their peaks: the ceiling), so
the engine never preempts for a budget the gateway opened.
"""

from typing import TYPE_CHECKING

from app.admission.recompute import EngineReading, RecomputeWindow

if TYPE_CHECKING:
    from app.admission.budget import BudgetConfig


class Overcommit:
    def __init__(self, config: "BudgetConfig") -> None:
        self.config = config
        self.factor = config.initial_factor
        # What preemption costs the engine.
        self.window = RecomputeWindow()
        self._calm_ticks = 0
        # Ticks left to hold still after a backoff.
        self._hold = 0

    @property
    def calm(self) -> bool:
        """No backoff lately: what the engine shows is not the aftermath of
        a preemption (preempted requests wait too)."""
        return self._hold == 0

    def hold_at_floor(self) -> None:
        """Preemptions and KV usage cannot be seen: overcommit cannot be
        adapted safely, so the factor stays at its floor."""
        self.factor = self.config.min_factor
        self.window = RecomputeWindow()
        self._calm_ticks = 0

    def observe(self, reading: EngineReading, queued: bool, ceiling: float) -> None:
        """One tick of the engine's facts (about once a second). With no
        preemption budget, any preemption backs off and the factor never
        goes above ``ceiling`` (lowered to it at once when that falls). With
        one, the factor backs off when the work recomputed over the last
        readings passes the budget's share of what the engine generated, and
        may open up to ``max_factor`` while it stays well within it."""
        config, window = self.config, self.window
        window.observe(reading)
        allowed = config.preemption_budget
        share = window.share()
        over = window.last_preempted if allowed <= 0 else share is not None and share > allowed
        if over:
            self.factor = max(config.min_factor, self.factor * config.backoff)
            self._hold = config.hold_after_backoff
            self._calm_ticks = 0
            window.restart()
            return
        top = ceiling if allowed <= 0 else config.max_factor
        self.factor = max(config.min_factor, min(top, self.factor))
        if self._hold > 0:
            self._hold -= 1
            return
        # Room to open up: the cache not yet full, or (with a budget) the
        # recomputed share well within it.
        roomy = reading.kv_usage < config.headroom or (
            allowed > 0 and (share is None or share < allowed / 2)
        )
        self._calm_ticks = self._calm_ticks + 1 if queued and roomy else 0
        if self._calm_ticks >= config.patience:
            self._calm_ticks = 0
            self.factor = max(config.min_factor, min(top, self.factor + config.step))
