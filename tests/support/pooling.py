"""The engines and the gateway the pooling routes' tests share: a pooling
engine (an embedding model or a classifier: vLLM's pooling runner under a
served name of its own, the session engine's small cache) and, in front of
it, a keyed gateway that runs one sequence at a time."""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.engines import ENGINE_KV_BLOCKS, Engine, running_engine
from tests.support.gateways import Gateway, running_gateway
from tests.support.keys import key_entry, write_keys_file

KEY = "key-acme"


@contextmanager
def pooling_engine(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    served: str,
    convert: str,
    model_dir: Path | None = None,
) -> Iterator[Engine]:
    """``model_dir`` (default: the tiny model) under ``--runner pooling
    --convert <convert>``, served as ``served``."""
    env = {
        "ENGINE_RUNNER": "pooling",
        "ENGINE_CONVERT": convert,
        "ENGINE_MODEL_NAME": served,
        "ENGINE_KV_BLOCKS": str(ENGINE_KV_BLOCKS),
    }
    if model_dir is not None:
        assert (model_dir / "config.json").exists(), f"{model_dir} is missing: run `make setup`"
        env["ENGINE_MODEL_DIR"] = str(model_dir)
    with running_engine(name, tmp_path_factory.mktemp(name), env) as started:
        yield started


@contextmanager
def one_at_a_time(tmp_path_factory: pytest.TempPathFactory, engine: Engine) -> Iterator[Gateway]:
    """A gateway with one key (``KEY``), one sequence at a time (so a second
    request waits in its queue), and no health checks after the first: an
    engine stopped on purpose stays in routing, so a request counted while it
    is stopped (its count times out, then it is estimated) is still admitted
    to it rather than left in the queue by an ejection that races the count."""
    keys = write_keys_file(
        tmp_path_factory.mktemp("keys") / "keys.yaml",
        [key_entry("acme-1", "acme", KEY, tokens_per_minute=100_000)],
    )
    settings: dict[str, object] = {"keys_file": keys, "max_concurrency": 1, "health_interval": 3600}
    with running_gateway(tmp_path_factory.mktemp("gateway"), engine.url, settings) as gateway:
        yield gateway
