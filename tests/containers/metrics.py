"""The engines' own metrics, read from inside their containers.

Engines need not publish a port (several of them cannot all have the same
one), so their ``/metrics`` is read with the Python every engine image
carries, in the container itself.
"""

from app.observe.promtext import Sample, parse, total
from tests.containers import podman
from tests.containers.compose import ComposeProject

FETCH = (
    "import sys, urllib.request; "
    "sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())"
)


def scrape_container(container: str, port: int, name: str) -> list[Sample]:
    text = podman.exec_in(container, "python3", "-c", FETCH, f"http://127.0.0.1:{port}/metrics")
    return parse(text, names=[name])


def engines_total(stack: ComposeProject, name: str) -> float:
    """A metric summed over every engine container of the stack."""
    return sum(
        total(scrape_container(container, endpoint.port, name), name)
        for endpoint in stack.engines()
        for container in stack.containers(endpoint.service)
    )
