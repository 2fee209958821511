"""The keys' layout for Redis Cluster: one engine's budget in one slot, its
own; one API key's limits in one slot; the fleet-wide state in one slot; an
admission spans exactly its engine's slot and the fleet's."""

from redis.crc import key_slot

from app.state import layout

ENGINES = ("http://engine-0:8000", "http://engine-1:8000", "http://10.0.3.7:8000")


def slots_of(keys: list[str]) -> set[int]:
    return {key_slot(key.encode()) for key in keys}


def test_each_engines_budget_lives_in_one_slot_of_its_own() -> None:
    slots = [slots_of(layout.engine(engine)) for engine in ENGINES]
    assert all(len(s) == 1 for s in slots)
    assert len(set.union(*slots)) == len(ENGINES)
    assert not set.union(*slots) & slots_of(layout.fleet_state())


def test_the_fleet_wide_state_lives_in_one_slot() -> None:
    assert len(slots_of(layout.fleet_state())) == 1


def test_an_api_keys_limits_live_in_one_slot() -> None:
    assert len(slots_of(layout.tokens("key-a") + layout.slots("key-a"))) == 1
    assert slots_of(layout.slots("key-a")) != slots_of(layout.slots("key-b"))


def test_an_admission_spans_its_engines_slot_and_the_fleets() -> None:
    hold = layout.fleet_state() + layout.engine(ENGINES[0])
    assert slots_of(hold) == slots_of(layout.fleet_state()) | slots_of(layout.engine(ENGINES[0]))
    assert len(slots_of(hold)) == 2
