"""Settings come from GATEWAY_* variables, and nonsense is refused."""

import pytest
from pydantic import ValidationError

from app.settings import Settings, sentinel_nodes


def test_environment_variables_with_the_prefix_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_UPSTREAM_URL", "http://engine:8000")
    monkeypatch.setenv("GATEWAY_ADMISSION", "off")
    settings = Settings()
    assert settings.upstream_url == "http://engine:8000"
    assert settings.admission == "off"


def test_the_drain_grace_must_fit_in_the_shutdown_timeout() -> None:
    with pytest.raises(ValidationError):
        Settings(drain_grace_seconds=30, shutdown_timeout=30)


def test_admission_is_on_or_off() -> None:
    with pytest.raises(ValidationError):
        Settings(admission="maybe")


def test_sentinels_are_host_port_pairs() -> None:
    settings = Settings(redis_sentinels="10.0.0.1:26379, sentinel-b:26380,[::1]:26381")
    assert sentinel_nodes(settings.redis_sentinels or "") == (
        ("10.0.0.1", 26379),
        ("sentinel-b", 26380),
        ("::1", 26381),
    )


@pytest.mark.parametrize(
    "given", ["sentinel-a", "sentinel-a:26379,", "sentinel-a:port", "a:99999", "u:p@a:1", "a:1/0"]
)
def test_a_sentinel_that_is_not_host_port_is_refused_by_name(given: str) -> None:
    with pytest.raises(ValidationError, match="is not a sentinel's host:port"):
        Settings(redis_sentinels=given)


def test_the_sentinel_passwords_need_sentinels() -> None:
    # A URL carries its own password: one given beside it would be ignored.
    with pytest.raises(ValidationError, match="go with GATEWAY_REDIS_SENTINELS"):
        Settings(redis_url="redis://redis:6379/0", redis_password="hunter2")
