"""What ``make up``'s gateways run with (deploy/stack.py): the caller's
settings as they are, as many sequences as the engine runs, and time to
drain before the process manager kills them."""

from pathlib import Path

import honcho.manager
import pytest
from honcho.manager import Manager

from app.engine.kv_events import endpoint_for
from app.settings import Settings
from deploy import stack
from deploy.stack import CPU_ENGINE_MAX_NUM_SEQS, gateway_environment, kill_wait

ENGINES = ["http://127.0.0.1:8001"]


def test_the_gateways_admit_as_many_sequences_as_the_engine_runs() -> None:
    # The Makefile exports ENGINE_MAX_NUM_SEQS empty: the engine's default.
    for unset in ({}, {"ENGINE_MAX_NUM_SEQS": ""}):
        env = gateway_environment(unset, ENGINES)
        assert env["GATEWAY_MAX_CONCURRENCY"] == str(CPU_ENGINE_MAX_NUM_SEQS)
    env = gateway_environment({"ENGINE_MAX_NUM_SEQS": "8"}, ENGINES)
    assert env["GATEWAY_MAX_CONCURRENCY"] == "8"


def test_the_gateways_count_prompts_with_the_engines_own_tokenizer_files() -> None:
    env = gateway_environment({}, ENGINES)
    # GATEWAY_PROMPT_TOKENS' default (auto) takes the files where they are given.
    assert "GATEWAY_PROMPT_TOKENS" not in env
    assert env["GATEWAY_TOKENIZER_DIR"] == str(stack.ROOT / ".models/tiny")
    other = gateway_environment({"ENGINE_MODEL_DIR": "/models/m"}, ENGINES)
    assert other["GATEWAY_TOKENIZER_DIR"] == "/models/m"
    asked = gateway_environment({"GATEWAY_PROMPT_TOKENS": "engine"}, ENGINES)
    assert asked["GATEWAY_PROMPT_TOKENS"] == "engine"


def test_every_gateway_setting_of_the_caller_reaches_the_gateways() -> None:
    caller = {
        "GATEWAY_MAX_CONCURRENCY": "16",
        "GATEWAY_QUEUE_TIMEOUT": "5",
        "GATEWAY_UPSTREAM_API_KEY": "sk-engine",
        "ENGINE_MAX_NUM_SEQS": "8",
    }
    env = gateway_environment(caller, ENGINES)
    assert {k: env[k] for k in caller} == caller
    assert env["GATEWAY_UPSTREAM_URLS"] == ENGINES[0]
    # Nothing of the stack's own in place of the settings' defaults.
    assert "GATEWAY_DRAIN_GRACE_SECONDS" not in gateway_environment({}, ENGINES)


def test_the_gateways_subscribe_to_the_engines_kv_events_beside_their_ports() -> None:
    """Each engine publishes on its port + 5 (ENGINE_KV_EVENTS_PORT), its
    replay on the next; the gateways' templates find both, unless the caller
    names others."""
    env = gateway_environment({}, ENGINES)
    assert endpoint_for(env["GATEWAY_KV_EVENTS_ENDPOINT"], ENGINES[0]) == "tcp://127.0.0.1:8006"
    replay = env["GATEWAY_KV_EVENTS_REPLAY_ENDPOINT"]
    assert endpoint_for(replay, ENGINES[0]) == "tcp://127.0.0.1:8007"
    mine = {"GATEWAY_KV_EVENTS_ENDPOINT": "tcp://{host}:9999"}
    assert gateway_environment(mine, ENGINES)["GATEWAY_KV_EVENTS_ENDPOINT"] == "tcp://{host}:9999"


def test_the_process_manager_waits_out_the_gateways_shutdown() -> None:
    settings = Settings()
    assert kill_wait(settings) > settings.shutdown_timeout > settings.drain_grace_seconds
    # The global the stack sets is the one honcho's loop reads.
    assert "KILL_WAIT" in honcho.manager.Manager.loop.__code__.co_names


def test_the_stack_traces_into_its_backend_unless_told_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed = tmp_path / "phoenix"
    installed.touch()
    monkeypatch.setattr(stack, "TRACE_BACKEND", installed)
    manager = Manager()
    gateways, engines = stack.trace_backend(manager, {"TRACES_PORT": "7006"})
    assert gateways == {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:7006/v1/traces"}
    assert engines == {"ENGINE_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4317"}
    assert list(manager._processes) == ["traces"]
    # Off when asked, when the caller names a collector of theirs, when not installed.
    for env in ({"TRACES": "off"}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}):
        manager = Manager()
        assert stack.trace_backend(manager, env) == ({}, {})
        assert not manager._processes
    monkeypatch.setattr(stack, "TRACE_BACKEND", tmp_path / "absent")
    assert stack.trace_backend(Manager(), {}) == ({}, {})


def test_cpu_lists_are_read_as_taskset_takes_them() -> None:
    assert stack.parse_cpus("0") == {0}
    assert stack.parse_cpus("0-2") == {0, 1, 2}
    assert stack.parse_cpus("0, 3-4") == {0, 3, 4}


def test_the_gateways_keep_to_the_cores_the_engines_leave() -> None:
    # The launcher's default: every core but the last for the engines.
    assert stack.gateway_cpus({}, {0, 1}) == "1"
    assert stack.gateway_cpus({"ENGINE_CPUS": ""}, {0, 1, 2, 3}) == "3"
    # The caller's engine cores, wherever they are.
    assert stack.gateway_cpus({"ENGINE_CPUS": "0-1"}, {0, 1, 2, 3}) == "2,3"
    assert stack.gateway_cpus({"ENGINE_CPUS": "2-3"}, {0, 1, 2, 3}) == "0,1"
    # None left (one core, or the engines on every core): not pinned.
    assert stack.gateway_cpus({}, {0}) is None
    assert stack.gateway_cpus({"ENGINE_CPUS": "0-3"}, {0, 1, 2, 3}) is None
