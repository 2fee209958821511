"""A real engine started with vLLM's own ``--api-key``, behind a gateway
that holds it (``GATEWAY_UPSTREAM_API_KEY``).

vLLM checks the key on /v1/* only (its /health and /metrics answer anyone),
so without the key a gateway's health checks pass but it cannot list the
engine's models: the engine counts as down, the log says why, nothing is
served. With it, every call carries the gateway's key and never
the client's: a client presenting some other key is still served.
"""

from collections.abc import Iterator

import httpx
import pytest
from openai import OpenAI

from tests.support.engines import MODEL, SMALL_ENGINE, Engine, running_engine
from tests.support.gateways import launch_gateway, running_gateway
from tests.support.wait import wait_until

ENGINE_KEY = "sk-engine-only"


@pytest.fixture(scope="module")
def keyed_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    env = {**SMALL_ENGINE, "ENGINE_EXTRA_ARGS": f"--api-key {ENGINE_KEY}"}
    with running_engine("keyed-engine", tmp_path_factory.mktemp("keyed-engine"), env) as engine:
        yield engine


def test_the_engine_checks_its_key_on_v1_only(keyed_engine: Engine) -> None:
    url = keyed_engine.url
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200
    assert httpx.get(f"{url}/metrics", timeout=10).status_code == 200
    assert httpx.get(f"{url}/v1/models", timeout=10).status_code == 401
    keyed = {"authorization": f"Bearer {ENGINE_KEY}"}
    assert httpx.get(f"{url}/v1/models", headers=keyed, timeout=10).status_code == 200


def test_the_gateway_serves_with_the_engines_key_whatever_the_client_sends(
    keyed_engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> None:
    settings: dict[str, object] = {"upstream_api_key": ENGINE_KEY, "admission": "off"}
    log_dir = tmp_path_factory.mktemp("gateway")
    with running_gateway(log_dir, keyed_engine.url, settings) as gateway:
        # The client's own key is not the engine's: were it passed on, the
        # engine would answer 401.
        client = OpenAI(base_url=f"{gateway.url}/v1", api_key="sk-a-client", max_retries=0)
        models = [model.id for model in client.models.list()]
        assert models == [MODEL]
        answer = client.completions.create(
            model=MODEL, prompt="Hello", max_tokens=5, extra_body={"ignore_eos": True}
        )
        assert answer.usage is not None
        assert answer.usage.completion_tokens == 5


def test_without_the_key_the_gateway_says_so_and_serves_nothing(
    keyed_engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The engine's /health passes while /v1/models answers 401: the engine
    counts as down, and the gateway's log says why."""
    gateway = launch_gateway(tmp_path_factory.mktemp("keyless"), keyed_engine.url, {})
    try:

        def refusal_logged() -> bool:
            return "answers 401 on /v1/models" in gateway.process.log_text()

        assert wait_until(refusal_logged, timeout=60), gateway.process.log_tail()
        assert "GATEWAY_UPSTREAM_API_KEY" in gateway.process.log_text()
        assert httpx.get(f"{gateway.url}/health/ready", timeout=10).status_code == 503
        body = {"model": MODEL, "prompt": "Hello", "max_tokens": 5}
        answer = httpx.post(f"{gateway.url}/v1/completions", json=body, timeout=30)
        assert answer.status_code == 503
        assert answer.json()["error"]["code"] == "engine_unavailable"
    finally:
        gateway.process.stop()
