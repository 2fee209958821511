"""A figure over the rounds of a run: its median and range, and how the
tables write it."""

import statistics


def spread(values: list[float]) -> dict[str, float] | None:
    """The median and range of ``values`` across rounds (None: none)."""
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def spread_text(s: dict[str, float] | None, digits: int = 2, scale: float = 1.0) -> str:
    """A median and its spread across rounds: ``0.93 (0.90–0.95)``."""
    if s is None:
        return "-"
    med, lo, hi = (f"{s[k] * scale:,.{digits}f}" for k in ("median", "min", "max"))
    return med if lo == hi else f"{med} ({lo}–{hi})"
