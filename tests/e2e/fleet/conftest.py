"""The fleet's second engine, shared by the package's modules: sized like the
session's and, like it, publishing its KV cache events and serving the same
LoRA adapters (both share the engine cores)."""

from collections.abc import Iterator

import pytest

from tests.support.engines import LORA, SMALL_ENGINE, Engine, running_engine


@pytest.fixture(scope="package")
def second(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    logs = tmp_path_factory.mktemp("second-engine")
    env = {**SMALL_ENGINE, **LORA}
    with running_engine("second-engine", logs, env, kv_events=True) as engine:
        yield engine
