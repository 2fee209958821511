"""The engine's learned sequence cap (``app.admission.sequence_cap``): a
cap learned from a queue that had another cause is re-tested and grows
while the gateway holds work back and the engine runs the whole cap with
none of its own waiting; the engine queueing again ends the probe, never
below what it has run with a queue. Pure."""

from app.admission.sequence_cap import LearnedCap


def learned_at(value: int, ceiling: int = 256) -> LearnedCap:
    cap = LearnedCap(patience=2, ceiling=ceiling)
    for _ in range(2):
        cap.observe(value, 3, ours=value + 3, room=True, calm=True, queued=True)
    assert cap.value == value
    return cap


def at_cap(cap: LearnedCap, ticks: int, **overrides: bool) -> None:
    """``ticks`` ticks of the engine running the whole cap, none waiting."""
    facts = {"room": True, "calm": True, "queued": True} | overrides
    for _ in range(ticks):
        assert cap.value is not None
        cap.observe(cap.value, 0, ours=cap.value, **facts)


def test_a_cap_learned_from_another_queue_grows_while_the_engine_runs_it_all() -> None:
    """Learned at 4 (a long prompt waited for blocks); then the engine runs
    4, none of its own waiting, the gateway's queue full: the cap grows a
    quarter (at least one) every ``patience`` ticks."""
    cap = learned_at(4)
    at_cap(cap, 1)
    assert cap.value == 4
    at_cap(cap, 1)
    assert cap.value == 5
    at_cap(cap, 2)
    assert cap.value == 7  # 5 + ceil(5 / 4)
    at_cap(cap, 4)
    assert cap.value == 12  # 7 → 9 → 12


def test_nothing_is_probed_without_work_held_back_room_or_calm_or_with_a_queue_in_the_engine() -> (
    None
):
    for overrides in ({"queued": False}, {"room": False}, {"calm": False}):
        cap = learned_at(4)
        at_cap(cap, 6, **overrides)
        assert cap.value == 4, overrides
    cap = learned_at(4)
    for _ in range(6):
        cap.observe(4, 1, ours=5, room=False, calm=True, queued=True)
    assert cap.value == 4
    # Running below the cap: the engine does not run all it may.
    for _ in range(6):
        cap.observe(3, 0, ours=3, room=True, calm=True, queued=True)
    assert cap.value == 4


def test_the_engine_queueing_again_ends_a_probe_at_what_it_has_run() -> None:
    """The engine's true cap is 128: a probe to 160 fills its queue while
    it runs 128, and the cap comes back to 128 — not lower, though a
    moment's level of 100 with a queue is seen later."""
    cap = learned_at(128)
    at_cap(cap, 2)
    assert cap.value == 160
    for _ in range(2):
        cap.observe(128, 16, ours=160, room=True, calm=True, queued=True)
    assert cap.value == 128
    for _ in range(3):
        cap.observe(100, 5, ours=144, room=True, calm=True, queued=True)
    assert cap.value == 128


def test_a_cap_grown_to_the_ceiling_is_no_cap() -> None:
    cap = learned_at(210)
    at_cap(cap, 2)
    assert cap.value is None
