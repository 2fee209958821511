"""The planner against a real engine whose KV cache is sized in bytes.

The engine gets ``VLLM_CPU_KVCACHE_SPACE`` (whole GiB) and no block override,
so vLLM derives its block count from bytes itself; the planner must arrive
at the same blocks, tokens and "Maximum concurrency" from the tiny model's
config.json and the engine's dtype. One engine for this module, stopped with
its whole process group afterwards. The counts are exact integers from a
deterministic formula, not timings.
"""

import re
from collections.abc import Iterator

import httpx
import pytest

from app.capacity import plan_capacity, read_model_config
from app.capacity.plan import GIB
from deploy.local import ROOT, ManagedProcess, scrape
from tests.support.engines import running_engine

KV_CACHE_GIB = 1
# Not a multiple of the CPU block size (128), so a sequence's last block is partial.
MAX_MODEL_LEN = 1000
SIZE_LINE = re.compile(
    r"KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request:"
    r" ([\d.]+)x"
)
DTYPE = re.compile(r"\bdtype=torch\.(\w+)")


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ManagedProcess]]:
    env = {
        "VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GIB),
        "ENGINE_MAX_MODEL_LEN": str(MAX_MODEL_LEN),
        # Empty, so neither `make test`'s exported block count nor extra flags apply.
        "ENGINE_KV_BLOCKS": "",
        "ENGINE_EXTRA_ARGS": "",
    }
    with running_engine("capacity-engine", tmp_path_factory.mktemp("capacity"), env) as started:
        yield started.url, started.process


def cache_config(url: str) -> dict[str, str]:
    (labels,) = [dict(s.labels) for s in scrape(url) if s.name == "vllm:cache_config_info"]
    return labels


def test_planner_matches_the_engine_sized_in_bytes(engine: tuple[str, ManagedProcess]) -> None:
    url, proc = engine
    info = cache_config(url)
    # The engine was sized in bytes: no override, and the bytes it was given.
    assert info["num_gpu_blocks_override"] == "None"
    assert int(info["kv_cache_memory_bytes"]) == KV_CACHE_GIB * GIB

    log = proc.log_text()
    dtype_match = DTYPE.search(log)
    assert dtype_match, "engine log names no dtype"
    (model,) = httpx.get(f"{url}/v1/models", timeout=10).json()["data"]
    assert model["max_model_len"] == MAX_MODEL_LEN

    shape = read_model_config(ROOT / ".models" / "tiny" / "config.json")
    plan = plan_capacity(
        shape,
        KV_CACHE_GIB * GIB,
        max_model_len=MAX_MODEL_LEN,
        block_size=int(info["block_size"]),
        dtype=dtype_match.group(1),
    )
    assert int(info["num_gpu_blocks"]) == plan.num_blocks
    # vLLM's "KV cache size" is concurrency × max_model_len: below blocks ×
    # block size when max_model_len leaves part of a sequence's last block unused.
    assert int(info["kv_cache_size_tokens"]) == plan.engine_reported_tokens()
    assert plan.engine_reported_tokens() < plan.kv_tokens
    assert float(info["kv_cache_max_concurrency"]) == pytest.approx(
        plan.max_concurrency(MAX_MODEL_LEN), rel=1e-6
    )

    size_line = SIZE_LINE.search(log)
    assert size_line, "engine log has no KV cache size line"
    tokens, per_request, concurrency = size_line.groups()
    assert int(tokens.replace(",", "")) == plan.engine_reported_tokens()
    assert int(per_request.replace(",", "")) == MAX_MODEL_LEN
    # The log rounds to two decimals.
    assert float(concurrency) == pytest.approx(plan.max_concurrency(MAX_MODEL_LEN), abs=0.005)
