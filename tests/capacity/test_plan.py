"""The capacity planner (``app.capacity.plan``): worked examples on real
models' configs, then the planner against a real engine whose KV cache is
sized in bytes.

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

from app.capacity import gpu_kv_cache_bytes, plan_capacity, read_model_config
from app.capacity.plan import GIB, sequences_that_fit
from deploy.local import ROOT, ManagedProcess, scrape
from tests.support.engines import running_engine
from tests.support.model_configs import CONFIGS


def test_llama_3_8b_in_60_gib_at_8k_context() -> None:
    shape = read_model_config(CONFIGS / "llama-3-8b.json")
    plan = plan_capacity(shape, 60 * GIB, max_model_len=8192, block_size=16, dtype="bfloat16")
    # 60 GiB / 128 KiB per token = 491,520 tokens = 30,720 blocks of 16.
    assert (plan.kv_tokens, plan.num_blocks) == (491_520, 30_720)
    # vLLM's figure counts every block ...
    assert plan.max_concurrency(8192) == pytest.approx(60.0)
    # ... but one is its null block: 30,719 // 512 sequences of 8,192 fit at once.
    assert plan.max_sequences(8192) == 59
    # 1,000 tokens hold 63 whole blocks: 30,719 // 63.
    assert plan.max_sequences(1000) == 487


def test_float32_doubles_the_bytes_and_auto_follows_the_checkpoint() -> None:
    shape = read_model_config(CONFIGS / "llama-3-8b.json")
    assert plan_capacity(shape, GIB, 1024, dtype="float32").kv_bytes_per_token == 262_144
    assert plan_capacity(shape, GIB, 1024, dtype="auto").dtype == "bfloat16"
    # GPT-2's config states no dtype (a float32 checkpoint): served in 16-bit.
    gpt2 = plan_capacity(read_model_config(CONFIGS / "gpt2.json"), GIB, 1024)
    assert gpt2.bytes_per_element == 2
    with pytest.raises(ValueError, match="quantized"):
        plan_capacity(shape, GIB, 1024, dtype="fp8")


def test_blocks_are_whole_and_sequences_hold_whole_blocks() -> None:
    shape = read_model_config(CONFIGS / "qwen2.5-0.5b-instruct.json")
    # One byte short of 10 blocks of 128 tokens holds 9.
    plan = plan_capacity(shape, 10 * 128 * 12_288 - 1, max_model_len=1000, block_size=128)
    assert plan.num_blocks == 9
    # 1,000 tokens need 8 blocks of 128, so vLLM's figure is 9 / 8.
    assert plan.max_concurrency(1000) == pytest.approx(1.125)
    assert plan.max_sequences(1000) == 1
    # 24 blocks (make up's cache): 23 hold tokens, so 11 sequences of 2 blocks, not 12.
    assert sequences_that_fit(24, 128, 144) == 11
    assert sequences_that_fit(25, 128, 144) == 12


def test_gpu_budget_is_the_share_of_the_card_less_the_weights() -> None:
    assert gpu_kv_cache_bytes(80 * GIB, 0.5, 10 * GIB, 2 * GIB) == 28 * GIB
    assert gpu_kv_cache_bytes(16 * GIB, 0.9, 20 * GIB) == 0
    with pytest.raises(ValueError, match="utilization"):
        gpu_kv_cache_bytes(16 * GIB, 1.5, GIB)


# --- against a real engine -------------------------------------------------------

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
