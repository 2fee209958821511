"""Which tests need the machine: a pytest plugin (registered in pyproject).

A test is ``live`` when it runs something outside the test process — real
vLLM, a gateway process, redis-server, dnsmasq, Prometheus, podman — or a
system tool (promtool, docker-compose, kubectl). ``make test-unit`` runs the
rest (``-m "not live"``): the pure and in-process tests, with no engine and
no root. Marking is by the fixtures a test uses (every real process comes
from one of them) and by the folders whose tests call system tools; so that
a new test cannot slip through unmarked, a unit run refuses to start any
program from outside the virtualenv.
"""

import os

import pytest

# Fixtures that start real processes, directly or through others (pytest's
# fixture closure includes the fixtures they depend on).
LIVE_FIXTURES = frozenset(
    {
        "engine",
        "trace_backend",
        "start_gateway",
        "redis",
        # Asks for "redis" only when its parameter does (keys/test_quota.py).
        "redis_url",
        "capped",
        "dns",
        "prometheus",
        "compose",
        "stack",
        "second",
        "sentinel_group",
        "redis_cluster",
        "redis_store",
    }
)
# Programs of the machine a unit test may still start: matplotlib lists the
# system's fonts once (fc-list), the first time it draws on a machine.
MACHINE_TOOLS_ALLOWED = frozenset({"fc-list"})
# Folders and modules whose tests run system tools rather than fixtures, and
# the end-to-end tests, every one of which runs real processes.
LIVE_PATHS = (
    "tests/e2e/",
    "tests/containers/",
    "tests/deploy/",
    "tests/observability/test_rules.py",
    "tests/observability/test_live.py",
    # git: the stamps' commits in the history.
    "tests/benchmarks/test_measurements.py",
)
UNIT_RUN = "TESTS_UNIT_ONLY"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = str(config.rootpath) + os.sep
    for item in items:
        path = str(item.path).removeprefix(root)
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & LIVE_FIXTURES or path.startswith(LIVE_PATHS):
            item.add_marker(pytest.mark.live)


@pytest.fixture(autouse=True)
def _no_machine_in_a_unit_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a unit run, a test may start programs of the test environment
    (the gateway, locust) but nothing of the machine's: a program outside
    the virtualenv is refused."""
    if os.environ.get(UNIT_RUN) != "1":
        return
    import shutil
    import subprocess
    import sys

    popen = subprocess.Popen
    venv = os.path.join(sys.prefix, "")

    def only_the_venvs(args: object, *rest: object, **kwargs: object) -> object:
        argv = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)  # type: ignore[call-overload]
        program = shutil.which(os.fsdecode(argv[0])) or os.fsdecode(argv[0])
        outside = not os.path.abspath(program).startswith(venv) and program != sys.executable
        if outside and os.path.basename(program) not in MACHINE_TOOLS_ALLOWED:
            raise AssertionError(
                f"a unit test started {program}: add its fixture to tests/support/live.py"
            )
        return popen(args, *rest, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(subprocess, "Popen", only_the_venvs)
