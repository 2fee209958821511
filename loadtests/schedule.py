"""Load shapes as plain schedules, parameterised by environment variables.

The locust shape classes (``loadtests/shapes.py``) follow these schedules, and
the report uses the same schedules to cut a run into its steps. No locust
import here: the report and the tests use this module in-process.

| shape | variables (defaults) |
|---|---|
| ``degradation`` | ``LOAD_STEPS`` (1,2,4,8,16,32,64 users), ``LOAD_STEP_SECONDS`` (20), |
| | ``LOAD_LONG_STEP_SECONDS`` (unset: every step as long), ``LOAD_LONG_FROM`` (16 users) |
| ``classes`` | the degradation's steps, with two classes of users (chat and bulk) |
| ``spike`` | ``LOAD_BASE_USERS`` (4), ``LOAD_SPIKE_USERS`` (48), ``LOAD_STEP_SECONDS`` (30) |
| ``ramp`` | ``LOAD_MAX_USERS`` (48), ``LOAD_RAMP_SECONDS`` (180) |
| ``soak`` | ``LOAD_USERS`` (8), ``LOAD_SOAK_SECONDS`` (600) |
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    start: float
    end: float
    users: int
    spawn_rate: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


def _int_list(value: str) -> list[int]:
    return [int(part) for part in value.replace(" ", "").split(",") if part]


def _steps(env: Mapping[str, str]) -> list[Stage]:
    """The degradation's steps. From ``LOAD_LONG_FROM`` users on (past the
    knee, where requests wait and a step completes fewer of them) a step may
    hold longer, so that its TTFT p99 rests on enough requests."""
    hold = float(env.get("LOAD_STEP_SECONDS", "20"))
    long_hold = float(env.get("LOAD_LONG_STEP_SECONDS") or hold)
    long_from = int(env.get("LOAD_LONG_FROM", "16"))
    stages, start = [], 0.0
    for users in _int_list(env.get("LOAD_STEPS", "1,2,4,8,16,32,64")):
        seconds = long_hold if users >= long_from else hold
        stages.append(Stage(start, start + seconds, users, spawn_rate=max(users, 1)))
        start += seconds
    return stages


def schedule(shape: str, env: Mapping[str, str] | None = None) -> list[Stage]:
    env = os.environ if env is None else env
    if shape in ("degradation", "classes"):
        return _steps(env)
    if shape == "spike":
        base = int(env.get("LOAD_BASE_USERS", "4"))
        peak = int(env.get("LOAD_SPIKE_USERS", "48"))
        hold = float(env.get("LOAD_STEP_SECONDS", "30"))
        return [
            Stage(0, hold, base, base),
            Stage(hold, 2 * hold, peak, peak),
            Stage(2 * hold, 3 * hold, base, peak),
        ]
    if shape == "ramp":
        top = int(env.get("LOAD_MAX_USERS", "48"))
        seconds = float(env.get("LOAD_RAMP_SECONDS", "180"))
        count = max(1, min(top, 12))
        hold = seconds / count
        return [
            Stage(i * hold, (i + 1) * hold, max(1, round(top * (i + 1) / count)), top)
            for i in range(count)
        ]
    if shape == "soak":
        users = int(env.get("LOAD_USERS", "8"))
        seconds = float(env.get("LOAD_SOAK_SECONDS", "600"))
        return [Stage(0, seconds, users, users)]
    raise ValueError(f"unknown shape {shape!r}; one of {', '.join(SHAPES)}")


SHAPES = ("degradation", "classes", "spike", "ramp", "soak")

# The user classes each shape runs by default (LOAD_USER_CLASSES overrides):
# the degradation sweep holds the workload fixed and changes only the load.
DEFAULT_USERS = {
    "degradation": "ChatUser",
    # Two classes on the same steps: what the gateway's order does for the
    # interactive one while the bulk one fills the engine.
    "classes": "PriorityChatUser,BulkUser",
    "spike": "ChatUser,RAGUser,SummaryUser,AbandoningUser",
    "ramp": "ChatUser,RAGUser,SummaryUser",
    "soak": "ChatUser,RAGUser,SummaryUser,AbandoningUser,TenantMixUser",
}
