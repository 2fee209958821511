"""The degradation's steps: from LOAD_LONG_FROM users on they may hold
longer, so that a TTFT p99 past the knee rests on enough requests; the
classes shape runs the same steps."""

from loadtests.schedule import DEFAULT_USERS, schedule

STEPS = {"LOAD_STEPS": "1,8,16,32", "LOAD_STEP_SECONDS": "10"}


def test_steps_from_the_knee_on_hold_longer_when_asked() -> None:
    stages = schedule("degradation", {**STEPS, "LOAD_LONG_STEP_SECONDS": "30"})
    assert [(s.start, s.end, s.users) for s in stages] == [
        (0, 10, 1),
        (10, 20, 8),
        (20, 50, 16),
        (50, 80, 32),
    ]


def test_where_the_long_steps_start_is_a_setting() -> None:
    env = {**STEPS, "LOAD_LONG_STEP_SECONDS": "30", "LOAD_LONG_FROM": "32"}
    assert [s.seconds for s in schedule("degradation", env)] == [10, 10, 10, 30]


def test_unasked_every_step_holds_alike() -> None:
    assert [s.seconds for s in schedule("degradation", STEPS)] == [10, 10, 10, 10]


def test_the_classes_shape_runs_the_degradations_steps_with_two_classes() -> None:
    env = {**STEPS, "LOAD_LONG_STEP_SECONDS": "30"}
    assert schedule("classes", env) == schedule("degradation", env)
    assert DEFAULT_USERS["classes"].split(",") == ["PriorityChatUser", "BulkUser"]
