"""The engine's learned sequence cap (``app.admission.sequence_cap``): the
most the engine has been seen running, taken once it queues with room at a
level; never learned from a queue the gateway's own requests cannot make.
Pure."""

from app.admission.sequence_cap import LearnedCap


def observe(cap: LearnedCap, running: int, waiting: int, ours: int, ticks: int = 2) -> None:
    for _ in range(ticks):
        cap.observe(running, waiting, ours=ours, room=True, calm=True)


def test_a_queue_at_a_lower_level_than_the_engine_has_run_caps_it_at_what_it_has_run() -> None:
    """The engine ran 12 of the gateway's requests; later a long prompt
    waits for blocks while 4 run: the cap is 12, not 4 (held at 4, the
    gateway's queue would keep the engine's own empty for good)."""
    cap = LearnedCap(patience=2)
    observe(cap, running=12, waiting=0, ours=12)
    assert cap.value is None
    observe(cap, running=4, waiting=3, ours=7)
    assert cap.value == 12


def test_the_cap_grows_with_what_the_engine_is_seen_running_and_never_falls() -> None:
    cap = LearnedCap(patience=2)
    observe(cap, running=8, waiting=3, ours=11)
    assert cap.value == 8
    observe(cap, running=10, waiting=5, ours=15)
    assert cap.value == 10
    observe(cap, running=6, waiting=5, ours=11)
    assert cap.value == 10


def test_a_queue_of_other_clients_requests_teaches_nothing_not_even_what_it_runs() -> None:
    """vllm-router drives the engine (2 running, 10 waiting) while the
    gateway has 3 requests there: no cap; nor does what the engine runs
    of others' requests count later (40 running, the gateway's 5)."""
    cap = LearnedCap(patience=2)
    observe(cap, running=2, waiting=10, ours=3, ticks=4)
    observe(cap, running=40, waiting=0, ours=5)
    assert cap.value is None
    observe(cap, running=6, waiting=6, ours=12)
    assert cap.value == 6


def test_a_full_cache_a_preemption_or_a_rising_count_teaches_nothing() -> None:
    cap = LearnedCap(patience=2)
    for _ in range(3):
        cap.observe(5, 9, ours=14, room=False, calm=True)
        cap.observe(5, 9, ours=14, room=True, calm=False)
    assert cap.value is None
    for running in (20, 41, 54, 80):
        cap.observe(running, 100, ours=running + 100, room=True, calm=True)
    assert cap.value is None
