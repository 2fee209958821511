"""The service classes' table (``app.admission.classes``): one row per
priority, each request's objective the tightest of its class's and what it
asked for."""

import pytest

from app.admission.classes import class_table, classes_of, objective_of
from app.request.identity import PRIORITIES
from app.settings import Settings


def test_the_table_names_every_class_in_the_orders_rank() -> None:
    table = classes_of(Settings())
    assert list(table) == list(PRIORITIES)
    assert [table[name].rank for name in PRIORITIES] == [0, 1, 2]
    # Lower runs first in the engine, and normal is the engine's default.
    assert [table[name].engine_priority for name in PRIORITIES] == [-1, 0, 1]
    assert [name for name in PRIORITIES if table[name].sheddable] == ["low"]


def test_a_class_without_an_objective_of_its_own_promises_the_queue_timeout() -> None:
    table = classes_of(Settings(queue_timeout=12, ttft_objective_high=0.5))
    assert {name: table[name].objective for name in PRIORITIES} == {
        "high": 0.5,
        "normal": 12,
        "low": 12,
    }


def test_a_request_gets_the_tightest_of_its_class_and_what_it_asked() -> None:
    table = class_table({"high": 1.0, "normal": 10.0, "low": 30.0})
    assert objective_of(table, "normal", None) == 10.0
    assert objective_of(table, "normal", 2.5) == 2.5
    # Asking for a looser one than the class promises changes nothing.
    assert objective_of(table, "high", 5.0) == 1.0


def test_sheddable_names_only_classes() -> None:
    assert classes_of(Settings(sheddable_classes="normal, low"))["normal"].sheddable
    assert not classes_of(Settings(sheddable_classes=""))["low"].sheddable
    with pytest.raises(ValueError, match="bulk is no class"):
        Settings(sheddable_classes="low,bulk")
