"""Settings come from GATEWAY_* variables, and nonsense is refused."""

import pytest
from pydantic import ValidationError

from app.settings import Settings


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
