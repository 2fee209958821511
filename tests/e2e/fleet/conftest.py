"""The fleet's second engine, shared by the package's modules: sized like the
session's and, like it, publishing its KV cache events (both share the
engine cores)."""

from collections.abc import Iterator

import pytest

from tests.support.engines import SMALL_ENGINE, Engine, running_engine


@pytest.fixture(scope="package")
def second(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    logs = tmp_path_factory.mktemp("second-engine")
    with running_engine("second-engine", logs, SMALL_ENGINE, kv_events=True) as engine:
        yield engine
