"""Reading Prometheus' text exposition: the one parser of the project (the
gateway reads the engine's ``/metrics``; the load tools and the tests read
both the engine's and the gateway's)."""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


def parse(text: str, names: Iterable[str] | None = None) -> list[Sample]:
    """The samples in ``text``; with ``names``, only the lines of those
    series are parsed (an engine exports hundreds)."""
    if names is not None:
        wanted = tuple(names)
        text = "\n".join(line for line in text.splitlines() if line.startswith(wanted))
    return [
        Sample(sample.name, dict(sample.labels), float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def total(samples: Iterable[Sample], name: str, labels: Mapping[str, str] | None = None) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels``."""
    wanted = labels or {}
    return sum(
        s.value
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in wanted.items())
    )


def present(samples: Iterable[Sample], name: str) -> bool:
    return any(s.name == name for s in samples)
