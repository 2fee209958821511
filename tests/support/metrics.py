"""Reading a process's ``/metrics`` as (name, labels, value) tuples (kept for
older callers; new code uses ``deploy.local``)."""

from collections.abc import Mapping

import httpx

from app.promtext import parse

Samples = list[tuple[str, dict[str, str], float]]


def scrape(base_url: str) -> Samples:
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    return [(s.name, dict(s.labels), s.value) for s in parse(text)]


def value(samples: Samples, name: str, labels: Mapping[str, str] | None = None) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels``."""
    return sum(
        v
        for n, sample_labels, v in samples
        if n == name and all(sample_labels.get(k) == val for k, val in (labels or {}).items())
    )


def metric(base_url: str, name: str, **labels: str) -> float:
    return value(scrape(base_url), name, labels)
