"""The local images that stand in for third-party ones no registry here can
give, and the compose variables that name them.

The compose files name those images by variable with the upstream default
(``${PROMETHEUS_IMAGE:-prom/prometheus:v3.5.0}``, ``REDIS_IMAGE``, and
``PYTHON_IMAGE``, the build argument the project's Dockerfiles start FROM).
``deploy/containers/setup.sh`` builds a stand-in for each and names it for
what it is: ``localhost/vllm-gateway-ci/<name>:<version inside>-bookworm``,
e.g. Debian's Prometheus 2.42.0 is ``prometheus:2.42.0-bookworm``. The
harness sets ``<NAME>_IMAGE`` to the one image in
``localhost/vllm-gateway-ci/<name>``; no image is ever tagged with an
upstream name it is not.
"""

import re
from collections.abc import Iterable

from tests.containers.podman import podman

LOCAL_REPOSITORY = "localhost/vllm-gateway-ci"
IMAGE_VARIABLE = re.compile(r"([A-Z][A-Z0-9]*)_IMAGE")


def image_variables(variables: Iterable[str]) -> list[str]:
    """The variables that name an image (PROMETHEUS_IMAGE, ...)."""
    return sorted(name for name in variables if IMAGE_VARIABLE.fullmatch(name))


def local_repository(variable: str) -> str:
    """PROMETHEUS_IMAGE -> localhost/vllm-gateway-ci/prometheus"""
    match = IMAGE_VARIABLE.fullmatch(variable)
    assert match, f"{variable} names no image"
    return f"{LOCAL_REPOSITORY}/{match.group(1).lower()}"


def stand_in(variable: str) -> str:
    """The one local image the variable is set to, by its full name."""
    repository = local_repository(variable)
    # The reference filter lists every name of each matching image.
    listing = podman(
        "images", "--filter", f"reference={repository}", "--format", "{{.Repository}}:{{.Tag}}"
    )
    names = sorted({name for name in listing.split() if name.startswith(f"{repository}:")})
    if len(names) != 1:
        raise RuntimeError(
            f"{variable}: want one image {repository}:<version>, found {names or 'none'}"
            " (deploy/containers/setup.sh makes it)"
        )
    return names[0]


def stand_ins(variables: Iterable[str]) -> dict[str, str]:
    """{PROMETHEUS_IMAGE: localhost/vllm-gateway-ci/prometheus:2.42.0-bookworm, ...}
    for every image variable among ``variables``."""
    return {variable: stand_in(variable) for variable in image_variables(variables)}
