"""The service classes: one table, one row per priority a request may have.

A class says where its requests stand in the order (``rank``: lower goes
first), the TTFT objective a request of it gets when neither its key nor its
header asks for a tighter one, whether a running request of it may be
stopped to make room for a higher class (``sheddable``), and the priority it
carries into the engine (vLLM's ``--scheduling-policy priority`` runs lower
numbers first and preempts the highest first when blocks run out; ``normal``
is 0, so a route where vLLM reads no priority runs as normal).

The table names every priority of ``app.request.identity``: a priority
added there without a row here fails at import.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from app.request.identity import PRIORITIES, Priority
from app.settings import Settings

# rank (the order's), the engine's priority; from the most important.
_ROWS: dict[Priority, int] = {"high": -1, "normal": 0, "low": 1}
if set(_ROWS) != set(PRIORITIES):
    raise ImportError(f"the class table must name every priority: {sorted(PRIORITIES)}")


@dataclass(frozen=True)
class ServiceClass:
    name: Priority
    rank: int
    # Seconds from arrival to the first token a request of it is promised.
    objective: float
    sheddable: bool
    engine_priority: int


ClassTable = Mapping[str, ServiceClass]


def class_table(
    objectives: Mapping[Priority, float], sheddable: frozenset[str] = frozenset({"low"})
) -> ClassTable:
    """The table, with each class's default objective (seconds)."""
    return MappingProxyType(
        {
            name: ServiceClass(
                name=name,
                rank=PRIORITIES.index(name),
                objective=objectives[name],
                sheddable=name in sheddable,
                engine_priority=_ROWS[name],
            )
            for name in PRIORITIES
        }
    )


def classes_of(settings: Settings) -> ClassTable:
    """The table the settings describe: a class without an objective of its
    own promises the queue's deadline (``queue_timeout``)."""
    given = {
        "high": settings.ttft_objective_high,
        "normal": settings.ttft_objective_normal,
        "low": settings.ttft_objective_low,
    }
    objectives: dict[Priority, float] = {}
    for name in PRIORITIES:
        own = given[name]
        objectives[name] = settings.queue_timeout if own is None else own
    return class_table(objectives, settings.sheddable)


def default_table(objective: float = 30.0) -> ClassTable:
    """Every class promising ``objective`` seconds, ``low`` sheddable (tests)."""
    return class_table(dict.fromkeys(PRIORITIES, objective))


def objective_of(table: ClassTable, priority: str, asked: float | None) -> float:
    """A request's objective: the tightest of its class's and what it (its
    key, its header) asked for."""
    default = table[priority].objective
    return default if asked is None else min(default, asked)
