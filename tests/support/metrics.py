"""Reading Prometheus text exposition (the gateway's and the engine's)."""

from collections.abc import Mapping

import httpx
from prometheus_client.parser import text_string_to_metric_families

Samples = list[tuple[str, dict[str, str], float]]


def scrape(base_url: str) -> Samples:
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    samples: Samples = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.append((sample.name, dict(sample.labels), float(sample.value)))
    return samples


def value(samples: Samples, name: str, labels: Mapping[str, str] | None = None) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels``."""
    wanted = labels or {}
    return sum(
        v
        for n, sample_labels, v in samples
        if n == name and all(sample_labels.get(k) == val for k, val in wanted.items())
    )


def metric(base_url: str, name: str, **labels: str) -> float:
    return value(scrape(base_url), name, labels)
