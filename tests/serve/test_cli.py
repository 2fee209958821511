"""The ``vllm-gateway`` command (app/serve/cli.py), as installed and as
``python -m app``: ``--help`` and ``--version`` start nothing, the start-up
names a misspelt setting, and ``settings`` prints what the gateway would run
with, its secrets masked."""

import importlib.metadata
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app import __version__
from app.serve.cli import main
from app.settings import Settings, variable

COMMANDS = {
    "console-script": [str(Path(sys.executable).with_name("vllm-gateway"))],
    "python-m-app": [sys.executable, "-m", "app"],
}
# Ample on a busy machine for a command that only prints; a server never exits.
EXIT_TIMEOUT = 60


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port this test listens on: a command that tried to serve on it would
    fail at once (address in use) instead of answering."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def run(command: list[str], port: int, **variables: str) -> subprocess.CompletedProcess[str]:
    """``command`` with only the given ``GATEWAY_*`` variables (none of this
    shell's), told to listen on ``port``."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("GATEWAY_")}
    env |= {"GATEWAY_HOST": "127.0.0.1", "GATEWAY_PORT": str(port), **variables}
    return subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=EXIT_TIMEOUT, check=False
    )


@pytest.mark.parametrize("command", COMMANDS.values(), ids=COMMANDS.keys())
def test_help_starts_nothing(command: list[str], held_port: int) -> None:
    # Settings the gateway would refuse: --help does not read them.
    done = run([*command, "--help"], held_port, GATEWAY_ADMISSION="maybe")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: vllm-gateway")
    assert "GATEWAY_UPSTREAM_URL" in done.stdout
    assert done.stderr == ""


@pytest.mark.parametrize("command", COMMANDS.values(), ids=COMMANDS.keys())
def test_version_starts_nothing(command: list[str], held_port: int) -> None:
    done = run([*command, "--version"], held_port)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"vllm-gateway {__version__}\n"


def test_the_installed_version_is_the_packages() -> None:
    """pyproject.toml reads the version from app/__init__.py: one home."""
    assert importlib.metadata.version("vllm-gateway") == __version__


def test_an_unknown_variable_is_reported_at_start_up(held_port: int) -> None:
    """The warning comes before the gateway binds its port: here, the held
    port stops it right after."""
    done = run(COMMANDS["console-script"], held_port, GATEWAY_QUEUE_TIMOUT="5")
    assert done.returncode != 0
    assert "Address already in use" in done.stderr
    logged = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    (line,) = [line for line in logged if "GATEWAY_QUEUE_TIMOUT" in line["message"]]
    assert line["level"] == "warning"
    assert "did you mean GATEWAY_QUEUE_TIMEOUT?" in line["message"]


def test_settings_prints_every_setting_with_its_secrets_masked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for key in list(os.environ):
        if key.upper().startswith("GATEWAY_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("GATEWAY_QUEUE_TIMEOUT", "7")
    monkeypatch.setenv("GATEWAY_UPSTREAM_API_KEY", "sk-engine-secret")
    monkeypatch.setenv("GATEWAY_REDIS_URL", "redis://gw:hunter2@redis.internal:6379/0")
    monkeypatch.setenv("GATEWAY_ROUTNG", "prefix")

    assert main(["settings"]) == 0
    out, err = capsys.readouterr()
    printed = dict(line.split("=", 1) for line in out.splitlines())
    assert list(printed) == [variable(name) for name in Settings.model_fields]
    assert printed["GATEWAY_QUEUE_TIMEOUT"] == "7.0"
    assert printed["GATEWAY_KV_BLOCKS"] == ""
    assert printed["GATEWAY_UPSTREAM_API_KEY"] == "***"
    assert printed["GATEWAY_REDIS_URL"] == "redis://gw:***@redis.internal:6379/0"
    assert "sk-engine-secret" not in out + err
    assert "hunter2" not in out + err
    assert "GATEWAY_ROUTNG" in err
    assert "did you mean GATEWAY_ROUTING?" in err


def test_invalid_settings_are_refused_in_a_sentence(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GATEWAY_ADMISSION", "maybe")
    assert main(["settings"]) == 2
    _, err = capsys.readouterr()
    assert err.startswith("vllm-gateway: invalid settings")
    assert "admission" in err
