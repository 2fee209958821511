"""The CPU compose stack, brought up once for the container tests.

These tests run in a step of their own (``make test-containers``, after the
main suite has stopped its engine: two engines on two cores are slow), on
images built beforehand by ``python -m tests.containers.images``. The main
run (``pytest`` with no arguments) does not collect them: they are collected
only when this directory, or a file in it, is named on the command line.

The stack runs under a project name of its own, on free host ports, against
a podman API service on a private socket. Whatever happens, the fixture takes
it all down again: containers, networks, volumes, the API service.
"""

import contextlib
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.containers import podman
from tests.containers.compose import ComposeProject, variable_defaults

HERE = Path(__file__).resolve().parent
# From `up` to every container healthy. The CPU engine compiles its kernels at
# start: about a minute on two idle cores, 4-8 minutes measured while other
# engines busied the same cores. The engine's own start_period is as long.
HEALTHY_WITHIN = 900.0


def named_on_command_line(config: pytest.Config) -> bool:
    for arg in config.args:
        path = (config.invocation_params.dir / arg.split("::")[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path.resolve().parent == HERE and not named_on_command_line(config):
        return True
    return None


def pytest_report_header(config: pytest.Config) -> list[str]:
    """What the run starts and what it leaves out, at the top of the log."""
    if not named_on_command_line(config):
        return []
    with tempfile.TemporaryDirectory() as tmp:
        env_file = Path(tmp) / "empty.env"
        env_file.write_text("")
        project = ComposeProject("header", env_file)
    lines = [f"compose services run: {', '.join(project.runnable())}"]
    defaults = variable_defaults()
    lines += [
        f"{variable}={image} (in place of {defaults.get(variable, 'no default')})"
        for variable, image in project.stand_ins.items()
    ]
    lines += [f"left out of the run: {name} ({why})" for name, why in project.left_out().items()]
    return lines


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``last`` (they stop the stack) run after all others."""
    items.sort(
        key=lambda item: HERE in item.path.parents and item.get_closest_marker("last") is not None
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "last: runs after every other container test")


def wait_until_healthy(project: ComposeProject, services: list[str], deadline: float) -> None:
    pending = {c for s in services for c in project.containers(s)}
    while pending and time.monotonic() < deadline:
        pending = {c for c in pending if podman.health_status(c) != "healthy"}
        time.sleep(1)
    if pending:
        raise AssertionError(f"not healthy after {HEALTHY_WITHIN:.0f} s: {sorted(pending)}")


def print_logs(project: ComposeProject, config: pytest.Config) -> None:
    """The services' last log lines, straight to the terminal: a session
    fixture's captured output is shown for no test."""
    result = project.run("logs", "--no-color", "--tail", "60", timeout=120)
    capture = config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\n--- docker-compose logs (last lines of each service) ---\n{result.stdout}")


def remove_leftovers(project: str) -> None:
    """Anything of the project that `down` did not remove."""
    label = f"label=com.docker.compose.project={project}"
    for kind, listing in (
        ("container", ["ps", "--all", "--filter", label, "--format", "{{.ID}}"]),
        ("network", ["network", "ls", "--filter", label, "--format", "{{.Name}}"]),
        ("volume", ["volume", "ls", "--filter", label, "--format", "{{.Name}}"]),
    ):
        for item in podman.podman(*listing, check=False).split():
            podman.podman(kind, "rm", "--force", item, check=False)


class StackRun:
    """One bring-up of the stack and everything it started, so that all of it
    is taken down again however far the bring-up got."""

    def __init__(self, tmp: Path, config: pytest.Config) -> None:
        self.config = config
        self.name = f"vgwtest{os.getpid()}"
        env_file = tmp / "empty.env"
        env_file.write_text("")
        self.env_file = env_file
        self.service = podman.ApiService(tmp / "podman.sock", tmp / "podman-service.log")
        self.project: ComposeProject | None = None
        self.health = podman.HealthChecks(self.name)

    def up(self) -> ComposeProject:
        self.service.wait_ready()
        self.project = ComposeProject(self.name, self.env_file, docker_host=self.service.url)
        services = self.project.runnable()
        self.health.start()
        # --no-build: the images were built from the Dockerfiles beforehand.
        # `up` waits for the engine to be healthy before it starts the gateway
        # (depends_on: service_healthy); the health-check thread makes that so.
        deadline = time.monotonic() + HEALTHY_WITHIN
        self.project.check("up", "-d", "--no-build", *services, timeout=HEALTHY_WITHIN)
        wait_until_healthy(self.project, services, deadline)
        return self.project

    def down(self, show_logs: bool) -> None:
        if self.project is not None and show_logs:
            with contextlib.suppress(Exception):
                print_logs(self.project, self.config)
        self.health.stop()
        if self.project is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.project.run("down", "--volumes", "--remove-orphans", "--timeout", "30")
        remove_leftovers(self.name)
        self.service.stop()
        left = podman.project_containers(self.name, running_only=False)
        assert not left, f"containers left behind: {left}"


@pytest.fixture(scope="session")
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ComposeProject]:
    podman.require_podman()
    run = StackRun(tmp_path_factory.mktemp("compose"), request.config)
    try:
        project = run.up()
    except BaseException:
        run.down(show_logs=True)
        raise
    try:
        yield project
    finally:
        run.down(show_logs=request.session.testsfailed > 0)
