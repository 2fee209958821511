"""Real vLLM engines for the tests (CPU build, tiny local model), started by
the project's own launcher on a free port.

The session's engine (tests/conftest.py) has a small KV cache (24 blocks of
128 tokens) and runs at most 8 sequences, so tests can saturate it on purpose.
It publishes its KV cache events as ``make up``'s engines do: on its port
+ 5, replayed on + 6 (``KV_EVENTS``: the gateway's settings that find them),
and serves two LoRA adapters with one slot (``LORA``), as the fleet's second
engine does.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from deploy.local import ManagedProcess, free_port, free_port_with
from deploy.stack import KV_EVENTS_OFFSET
from tests.support.services import Service

ENGINE_KV_BLOCKS = 24
ENGINE_MAX_NUM_SEQS = 8
MODEL = "tiny"
# The launcher's settings for an engine sized like the session's.
SMALL_ENGINE = {
    "ENGINE_KV_BLOCKS": str(ENGINE_KV_BLOCKS),
    "ENGINE_MAX_NUM_SEQS": str(ENGINE_MAX_NUM_SEQS),
    "ENGINE_MODEL_NAME": MODEL,
}

# The LoRA adapters the fleet's engines serve (``make setup`` builds them),
# one slot each: two adapters on one engine take turns.
ADAPTERS = ("sql", "poem")
LORA = {
    "ENGINE_LORA_MODULES": " ".join(
        f"{name}={Path(__file__).parents[2] / '.models/tiny-adapters' / name}" for name in ADAPTERS
    ),
    "ENGINE_MAX_LORAS": "1",
    # Adapters loaded and unloaded at run time (the gateway's admin port).
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
}

# A gateway's settings for engines started with ``kv_events``.
KV_EVENTS = {
    "kv_events_endpoint": f"tcp://{{host}}:{{port+{KV_EVENTS_OFFSET}}}",
    "kv_events_replay_endpoint": f"tcp://{{host}}:{{port+{KV_EVENTS_OFFSET + 1}}}",
}

Engine = Service


def engine_idle(metric: Callable[[str], float]) -> bool:
    """Nothing running and nothing waiting, by the engine's own gauges;
    ``metric`` reads one (``engine.metric``, or a sum over several engines)."""
    return metric("vllm:num_requests_running") == 0 and metric("vllm:num_requests_waiting") == 0


# The tests' engines run eagerly (no graph compiled at start-up): the
# scheduler, the KV cache, preemption, aborts and metrics are the same, and
# an engine the suite starts is ready in about half the time. What the
# engine costs compiled is measured by the benchmarks, which start theirs
# as ``make up`` does.
EAGER = {"ENGINE_EXTRA_ARGS": "--enforce-eager"}


def launch_engine(name: str, log_dir: Path, port: int, env: dict[str, str]) -> ManagedProcess:
    """The project's launcher starting an engine on ``port``, with the
    launcher's ``ENGINE_*`` settings in ``env``; not yet healthy."""
    return ManagedProcess(
        name, ["deploy/engine/run-cpu.sh"], {"ENGINE_PORT": str(port), **EAGER, **env}, log_dir
    )


def kv_events_port(port: int) -> int:
    """Where an engine on ``port`` started with ``kv_events`` publishes."""
    return port + KV_EVENTS_OFFSET


@contextmanager
def running_engine(
    name: str, log_dir: Path, env: dict[str, str], kv_events: bool = False
) -> Iterator[Engine]:
    """``launch_engine`` on a free port, once healthy; stopped (its process
    group) on exit. ``kv_events``: it publishes them beside its port."""
    port = free_port_with(KV_EVENTS_OFFSET, KV_EVENTS_OFFSET + 1) if kv_events else free_port()
    if kv_events:
        env = {**env, "ENGINE_KV_EVENTS_PORT": str(kv_events_port(port))}
    proc = launch_engine(name, log_dir, port, env)
    try:
        url = f"http://127.0.0.1:{port}"
        proc.wait_http(f"{url}/health", timeout=900)
        yield Service(url, proc)
    finally:
        proc.stop()
