"""The images built from the project's Dockerfiles, looked at from inside:
what the build context lets in, and what the gateway image runs."""

import json
import re
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest

from tests.containers import podman
from tests.containers.compose import ROOT, ComposeProject
from tests.containers.stand_ins import stand_in
from tests.support.locks import lock_pins

pytestmark = pytest.mark.timeout(600)

DOCKERFILES = (
    ROOT / "Dockerfile",
    ROOT / "deploy" / "engine" / "Dockerfile.cpu",
    ROOT / "deploy" / "traces" / "Dockerfile",
)


def instructions(path: Path) -> list[tuple[str, str]]:
    """(keyword, arguments) of a Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", path.read_text())
    found = []
    for line in text.splitlines():
        keyword, _, args = line.strip().partition(" ")
        if keyword and not keyword.startswith("#"):
            found.append((keyword.upper(), args.strip()))
    return found


def copied_sources() -> set[PurePosixPath]:
    """What the Dockerfiles COPY from the build context."""
    sources: set[PurePosixPath] = set()
    for path in DOCKERFILES:
        for keyword, args in instructions(path):
            if keyword == "COPY" and not args.startswith("--from"):
                sources |= {PurePosixPath(source) for source in args.split()[:-1]}
    return sources


def base_image() -> str:
    """What the gateway Dockerfile starts FROM, as the builds here set it:
    an image variable (${PYTHON_IMAGE}) is its local stand-in."""
    first = next(
        args.split()[0] for keyword, args in instructions(DOCKERFILES[0]) if keyword == "FROM"
    )
    variable = re.fullmatch(r"\$\{?(\w+)\}?", first)
    return stand_in(variable.group(1)) if variable else first


@pytest.fixture
def context_files(tmp_path: Path) -> Iterator[set[PurePosixPath]]:
    """Every file a build from the repository root receives, as the builder
    sees it (through .dockerignore): copied whole into a throwaway image."""
    image = f"localhost/vllm-gateway-context-check:{tmp_path.name.lower()}"
    containerfile = tmp_path / "Containerfile"
    containerfile.write_text(f"FROM {base_image()}\nCOPY . /context\n")
    try:
        podman.podman("build", "--quiet", "-t", image, "-f", str(containerfile), str(ROOT))
        listing = podman.podman(
            "run", "--rm", "--entrypoint", "find", image, "/context", "-type", "f"
        )
        yield {PurePosixPath(line).relative_to("/context") for line in listing.split()}
    finally:
        podman.podman("rmi", "--force", image, check=False)


def test_the_build_context_holds_only_what_the_dockerfiles_copy(
    context_files: set[PurePosixPath],
) -> None:
    sources = copied_sources()
    stray = {
        path
        for path in context_files
        if not any(path == source or source in path.parents for source in sources)
    }
    # The virtual environments, the local model, .git, .env, caches: never sent.
    assert not stray, f"sent to the builder but copied by no Dockerfile: {sorted(map(str, stray))}"
    for source in sources:
        assert any(path == source or source in path.parents for path in context_files), source
    assert not any(part == "__pycache__" for path in context_files for part in path.parts)


INSTALLED = (
    "import importlib.metadata as m, json, re; "
    "print(json.dumps({re.sub(r'[-_.]+', '-', d.metadata['Name']).lower(): d.version "
    "for d in m.distributions()}))"
)


def installed_versions(image: str) -> dict[str, str]:
    """Every distribution installed in the image, by canonical name."""
    found: dict[str, str] = json.loads(
        podman.podman("run", "--rm", "--entrypoint", "python", image, "-c", INSTALLED)
    )
    return found


def not_as_locked(installed: dict[str, str], lock: str) -> dict[str, tuple[str, str | None]]:
    """The packages of ``lock`` not installed at their locked version:
    {name: (locked, installed)}."""
    locked = lock_pins(lock)
    assert locked
    return {
        name: (version, installed.get(name))
        for name, version in locked.items()
        if installed.get(name) != version
    }


def project_images(tmp_path: Path) -> ComposeProject:
    env_file = tmp_path / "empty.env"
    env_file.write_text("")
    return ComposeProject("images", env_file)


def test_the_gateway_image_runs_the_locked_versions(tmp_path: Path) -> None:
    """requirements/runtime.lock, the lock the test suite's environment is
    built against, is what the gateway image has installed."""
    project = project_images(tmp_path)
    images = {project.services[gateway]["image"] for gateway in project.gateways()}
    assert images
    for image in images:
        installed = installed_versions(image)
        wrong = not_as_locked(installed, "requirements/runtime.lock")
        assert not wrong, f"{image}: locked vs installed: {wrong}"
        assert "vllm-gateway" in installed


def test_the_trace_backend_image_runs_the_local_stacks_versions(tmp_path: Path) -> None:
    """requirements/traces.lock, what `make trace-backend` installs for the
    local stack and the tests, is what the trace backend image has."""
    project = project_images(tmp_path)
    backend = project.trace_backend().service
    assert project.image_built_here(backend)
    image = project.services[backend]["image"]
    wrong = not_as_locked(installed_versions(image), "requirements/traces.lock")
    assert not wrong, f"{image}: locked vs installed: {wrong}"
