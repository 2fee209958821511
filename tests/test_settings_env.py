"""The ``GATEWAY_*`` prefix is the gateway's: a variable that names no setting
is found, with the closest setting's name; an empty one is its default."""

import pytest

from app.settings import Settings, masked_url, unknown_variables, variable


def test_a_misspelt_setting_is_found_with_the_closest_name() -> None:
    environ = {
        "GATEWAY_QUEUE_TIMOUT": "5",
        "GATEWAY_MAX_CONCURENCY": "64",
        "GATEWAY_UPSTREAM_API_KEY": "sk",
        "PATH": "/usr/bin",
    }
    assert unknown_variables(environ) == [
        ("GATEWAY_MAX_CONCURENCY", "GATEWAY_MAX_CONCURRENCY"),
        ("GATEWAY_QUEUE_TIMOUT", "GATEWAY_QUEUE_TIMEOUT"),
    ]


def test_a_name_close_to_none_is_found_without_a_guess() -> None:
    assert unknown_variables({"GATEWAY_REPLICAS": "2"}) == [("GATEWAY_REPLICAS", None)]


def test_every_setting_is_known_whatever_its_case() -> None:
    environ = {variable(name): "x" for name in Settings.model_fields}
    environ["gateway_log_level"] = "debug"
    assert unknown_variables(environ) == []
    assert unknown_variables({"gateway_log_levle": "debug"}) == [
        ("gateway_log_levle", "GATEWAY_LOG_LEVEL")
    ]


def test_an_empty_variable_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compose passes every setting as ``${GATEWAY_NAME:-}``."""
    for name in ("QUEUE_TIMEOUT", "KV_BLOCKS", "REDIS_URL", "UPSTREAM_API_KEY", "ROUTING"):
        monkeypatch.setenv(f"GATEWAY_{name}", "")
    settings = Settings()
    for name in ("queue_timeout", "kv_blocks", "redis_url", "upstream_api_key", "routing"):
        assert getattr(settings, name) == Settings.model_fields[name].default, name


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://redis:6379/0", "redis://redis:6379/0"),
        ("redis://:hunter2@redis:6379/0", "redis://:***@redis:6379/0"),
        ("rediss://app:hunter2@[::1]:6380/1", "rediss://app:***@[::1]:6380/1"),
        ("redis://app:hunter2@redis/0", "redis://app:***@redis/0"),
    ],
)
def test_a_urls_password_is_masked(url: str, shown: str) -> None:
    assert masked_url(url) == shown
