"""What ``make up``'s gateways run with (deploy/stack.py): the caller's
settings as they are, as many sequences as the engine runs, and time to
drain before the process manager kills them."""

import honcho.manager

from app.settings import Settings
from deploy.stack import CPU_ENGINE_MAX_NUM_SEQS, gateway_environment, kill_wait

ENGINES = ["http://127.0.0.1:8001"]


def test_the_gateways_admit_as_many_sequences_as_the_engine_runs() -> None:
    # The Makefile exports ENGINE_MAX_NUM_SEQS empty: the engine's default.
    for unset in ({}, {"ENGINE_MAX_NUM_SEQS": ""}):
        env = gateway_environment(unset, ENGINES)
        assert env["GATEWAY_MAX_CONCURRENCY"] == str(CPU_ENGINE_MAX_NUM_SEQS)
    env = gateway_environment({"ENGINE_MAX_NUM_SEQS": "8"}, ENGINES)
    assert env["GATEWAY_MAX_CONCURRENCY"] == "8"


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


def test_the_process_manager_waits_out_the_gateways_shutdown() -> None:
    settings = Settings()
    assert kill_wait(settings) > settings.shutdown_timeout > settings.drain_grace_seconds
    # The global the stack sets is the one honcho's loop reads.
    assert "KILL_WAIT" in honcho.manager.Manager.loop.__code__.co_names
