"""Every gateway setting reaches the gateways in compose: what an operator's
``.env`` sets, docker-compose.yml passes on, in both variants. The settings
come from the settings model (app/settings.py), so a setting added there and
not to the compose file fails here; the compose environment is generated from
the same model (deploy/compose_settings.py)."""

import os
import types
import typing
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import SecretStr
from pydantic.fields import FieldInfo

from app.settings import Settings, variable
from deploy import compose_settings
from tests.deploy.compose_files import (
    BASE,
    CPU_FILE,
    VARIANTS,
    Compose,
    Service,
    gateway_services,
    required_tool,
)

# One of the optional files, which sets what it is for.
WITH_KEYS = ["-f", BASE, "-f", CPU_FILE, "-f", compose_settings.OPTIONAL_FILES["keys_file"]]


# Settings whose text has a form of its own.
FORMED = {
    "redis_sentinels": "sentinel-a:26379,sentinel-b:26379",
    "sheddable_classes": "normal,low",
    "cold_models": "tiny=2048,large",
}
# Settings that exclude one set in the operator's .env (a cluster is not
# reached through sentinels; requests are not held for a cold start with
# admission off): left out of it, each reaching the gateways is tested on
# its own.
APART = {"redis_cluster": "true", "cold_start_timeout": "30.0"}


def other_value(name: str, field: FieldInfo) -> str:
    """A valid value for a setting that is not its default, as .env writes it."""
    if name in FORMED:
        return FORMED[name]
    default = field.default
    kinds = typing.get_args(field.annotation) if _is_union(field.annotation) else ()
    kind = next((k for k in kinds if k is not type(None)), field.annotation)
    if typing.get_origin(kind) is Literal:
        return str(next(choice for choice in typing.get_args(kind) if choice != default))
    if kind is bool:
        return str(not default).lower()
    if kind is int:
        return str(default + 1 if default is not None else 7)
    if kind is float:
        return str(default + 0.25 if default is not None else 1.5)
    if kind is Path:
        return f"/etc/vllm-gateway/{name}"
    if kind in (str, SecretStr):
        return f"http://{name.replace('_', '-')}.example:9000"
    raise AssertionError(f"{name}: no value for {field.annotation}")


def _is_union(annotation: Any) -> bool:
    return isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union


def read_as_the_gateway(service: Service, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """A service's environment, as the gateway reads it."""
    with monkeypatch.context() as patch:
        for key in list(os.environ):
            if key.upper().startswith("GATEWAY_"):
                patch.delenv(key)
        for key, value in service["environment"].items():
            patch.setenv(key, str(value))
        return Settings()


@pytest.fixture(scope="module")
def operators_env() -> dict[str, str]:
    """An .env that sets every setting compose leaves to the operator."""
    fields = Settings.model_fields
    return {variable(name): other_value(name, fields[name]) for name in fields if name not in APART}


@pytest.fixture(scope="module")
def compose(tmp_path_factory: pytest.TempPathFactory, operators_env: dict[str, str]) -> Compose:
    env_file = tmp_path_factory.mktemp("compose") / "operator.env"
    env_file.write_text("".join(f"{key}={value}\n" for key, value in operators_env.items()))
    return Compose(required_tool("docker-compose"), env_file)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_setting_in_env_reaches_both_gateways(
    compose: Compose,
    operators_env: dict[str, str],
    variant: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    services = compose.resolved(variant)["services"]
    expected = Settings.model_validate(
        {name: operators_env[variable(name)] for name in Settings.model_fields if name not in APART}
    )
    for name in gateway_services({"services": services}):
        settings = read_as_the_gateway(services[name], monkeypatch)
        missed = [
            field
            for field in compose_settings.passed_from_env()
            if getattr(settings, field) != getattr(expected, field)
        ]
        assert missed == [], f"{name}: .env does not reach {[variable(f) for f in missed]}"
        # What compose owns stays as the network needs it.
        for field, value in compose_settings.FIXED.items():
            assert str(getattr(settings, field)) == value, field
        assert settings.keys_file is None


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_settings_apart_reach_both_gateways(
    tmp_path: Path, variant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_file = tmp_path / "apart.env"
    env_file.write_text(
        "GATEWAY_REDIS_URL=redis://redis-node-a.example:7000\nGATEWAY_COLD_MODELS=tiny\n"
        + "".join(f"{variable(name)}={value}\n" for name, value in APART.items())
    )
    services = Compose(required_tool("docker-compose"), env_file).resolved(variant)["services"]
    for service in gateway_services({"services": services}):
        settings = read_as_the_gateway(services[service], monkeypatch)
        for name, value in APART.items():
            field = Settings.model_fields[name]
            assert str(getattr(settings, name)).lower() == value != str(field.default).lower()


def test_the_settings_compose_owns_are_few_and_explained() -> None:
    """Only where the gateway listens, and the keys file the keys file
    mounts, are not the operator's to set through .env."""
    owned = set(compose_settings.FIXED) | set(compose_settings.OPTIONAL_FILES)
    assert owned == {"host", "port", "admin_port", "keys_file"}
    assert set(compose_settings.passed_from_env()) == set(Settings.model_fields) - owned


def test_the_keys_file_sets_the_keys_file(
    compose: Compose, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = compose.resolved_files(WITH_KEYS, env={"KEYS_DIR": "./deploy"})["services"]
    for name in gateway_services({"services": services}):
        settings = read_as_the_gateway(services[name], monkeypatch)
        assert settings.keys_file == Path("/etc/vllm-gateway/keys/keys.yaml"), name
        assert settings.queue_timeout != Settings.model_fields["queue_timeout"].default


def test_the_compose_files_are_the_generated_ones() -> None:
    """docker-compose.yml and .env.example as `python -m deploy.compose_settings`
    writes them from the settings model."""
    for path, text in compose_settings.generated().items():
        assert path.read_text() == text, f"{path.name}: run python -m deploy.compose_settings"


def test_without_an_env_file_the_gateways_run_on_their_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh clone has .env.example only: nothing is needed to start, and
    the gateways then run with the settings' defaults, but for where they
    listen and what they talk to."""
    empty = tmp_path / "empty.env"
    empty.write_text("")
    services = Compose(required_tool("docker-compose"), empty).resolved("gpu")["services"]
    settings = read_as_the_gateway(services["gateway"], monkeypatch)
    stack = set(compose_settings.FIXED) | set(compose_settings.COMPOSE_DEFAULTS)
    # Each variant's own: where the gateways find the engine's model files.
    stack.add("tokenizer_dir")
    for name, field in Settings.model_fields.items():
        if name not in stack:
            assert getattr(settings, name) == field.default, name


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_gateways_admit_as_many_sequences_as_the_engine_runs(
    tmp_path: Path, variant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty.env"
    empty.write_text("")
    services = Compose(required_tool("docker-compose"), empty).resolved(variant)["services"]
    engine = services["vllm"]
    if variant == "gpu":
        (flag,) = [a for a in engine["command"] if str(a).startswith("--max-num-seqs=")]
        seqs = int(str(flag).split("=", 1)[1])
    else:
        seqs = int(engine["environment"]["ENGINE_MAX_NUM_SEQS"])
    settings = read_as_the_gateway(services["gateway"], monkeypatch)
    assert settings.max_concurrency == seqs
