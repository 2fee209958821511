"""Real vLLM engines for the tests (CPU build, tiny local model), started by
the project's own launcher on a free port.

The session's engine (tests/conftest.py) has a small KV cache (24 blocks of
128 tokens) and runs at most 8 sequences, so tests can saturate it on purpose.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from deploy.local import ManagedProcess, free_port
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

Engine = Service


def engine_idle(metric: Callable[[str], float]) -> bool:
    """Nothing running and nothing waiting, by the engine's own gauges;
    ``metric`` reads one (``engine.metric``, or a sum over several engines)."""
    return metric("vllm:num_requests_running") == 0 and metric("vllm:num_requests_waiting") == 0


def launch_engine(name: str, log_dir: Path, port: int, env: dict[str, str]) -> ManagedProcess:
    """The project's launcher starting an engine on ``port``, with the
    launcher's ``ENGINE_*`` settings in ``env``; not yet healthy."""
    return ManagedProcess(
        name, ["deploy/engine/run-cpu.sh"], {"ENGINE_PORT": str(port), **env}, log_dir
    )


@contextmanager
def running_engine(name: str, log_dir: Path, env: dict[str, str]) -> Iterator[Engine]:
    """``launch_engine`` on a free port, once healthy; stopped (its process
    group) on exit."""
    port = free_port()
    proc = launch_engine(name, log_dir, port, env)
    try:
        url = f"http://127.0.0.1:{port}"
        proc.wait_http(f"{url}/health", timeout=900)
        yield Service(url, proc)
    finally:
        proc.stop()
