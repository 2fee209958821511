"""The engines' own metrics, read from inside their containers.

Engines need not publish a port (several of them cannot all have the same
one), so their ``/metrics`` is read with the Python every engine image
carries, in the container itself.
"""

from prometheus_client.parser import text_string_to_metric_families

from tests.containers import podman
from tests.containers.compose import ComposeProject
from tests.support.metrics import Samples, value

FETCH = (
    "import sys, urllib.request; "
    "sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())"
)


def scrape_container(container: str, port: int) -> Samples:
    text = podman.exec_in(container, "python3", "-c", FETCH, f"http://127.0.0.1:{port}/metrics")
    return [
        (sample.name, dict(sample.labels), float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def engines_total(stack: ComposeProject, name: str) -> float:
    """A metric summed over every engine container of the stack."""
    return sum(
        value(scrape_container(container, endpoint.port), name)
        for endpoint in stack.engines()
        for container in stack.containers(endpoint.service)
    )
