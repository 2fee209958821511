"""The capacity planner against real models' configs (tests/data/model_configs/,
written from the published config.json files) and worked examples.

The check against a running engine is tests/capacity/test_engine_capacity.py.
"""

import json
import math
from pathlib import Path

import pytest

from app.capacity import (
    UnsupportedModel,
    gpu_kv_cache_bytes,
    plan_capacity,
    read_model_config,
)
from app.capacity.__main__ import main
from app.capacity.model import shape_from_config
from app.capacity.plan import GIB, sequences_that_fit
from app.capacity.weights import estimate_parameters

CONFIGS = Path(__file__).parent / "data" / "model_configs"


@pytest.mark.parametrize(
    ("config", "layers", "kv_heads", "head_dim", "bytes_per_token"),
    [
        # Grouped-query attention: 8 KV heads serve 32 query heads.
        ("llama-3-8b.json", 32, 8, 128, 131_072),
        ("qwen2.5-0.5b-instruct.json", 24, 2, 64, 12_288),
        # Multi-head: four times Llama-3-8B's cache per token at the same depth and width.
        ("llama-2-7b.json", 32, 32, 128, 524_288),
        # An explicit head_dim that is not hidden_size / heads (3072 / 16 = 192).
        ("gemma-7b.json", 28, 16, 256, 458_752),
        # Grouped-query and an explicit head_dim (5120 / 32 = 160).
        ("mistral-nemo-base-2407.json", 40, 8, 128, 163_840),
        ("mistral-7b-v0.1.json", 32, 8, 128, 131_072),
        # GPT-2 spells everything differently and has no KV head count (multi-head).
        ("gpt2.json", 12, 12, 64, 36_864),
    ],
)
def test_kv_bytes_per_token_of_real_configs(
    config: str, layers: int, kv_heads: int, head_dim: int, bytes_per_token: int
) -> None:
    shape = read_model_config(CONFIGS / config)
    assert (shape.layers, shape.kv_heads, shape.head_dim) == (layers, kv_heads, head_dim)
    plan = plan_capacity(shape, GIB, max_model_len=1024)
    assert plan.bytes_per_element == 2
    assert plan.kv_bytes_per_token == bytes_per_token


def test_attention_kinds_are_named() -> None:
    assert read_model_config(CONFIGS / "llama-3-8b.json").attention_kind == "grouped-query"
    assert read_model_config(CONFIGS / "gemma-7b.json").attention_kind == "multi-head"
    falcon_like = {"num_hidden_layers": 2, "num_attention_heads": 8, "hidden_size": 512}
    shape = shape_from_config({**falcon_like, "multi_query": True}, Path("x"))
    assert (shape.kv_heads, shape.attention_kind) == (1, "multi-query")


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


def test_sliding_window_is_flagged_only_where_it_applies() -> None:
    (caveat,) = read_model_config(CONFIGS / "mistral-7b-v0.1.json").caveats
    assert "sliding-window" in caveat
    assert "4,096" in caveat
    # Qwen2.5 states a window but switches it off (use_sliding_window: false).
    assert read_model_config(CONFIGS / "qwen2.5-0.5b-instruct.json").caveats == ()
    assert read_model_config(CONFIGS / "mistral-nemo-base-2407.json").caveats == ()
    interleaved = {
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "hidden_size": 1024,
        "sliding_window": 512,
        "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
    }
    (caveat,) = shape_from_config(interleaved, Path("x")).caveats
    assert "3 of 4 layers" in caveat


def test_what_the_formula_does_not_fit_is_refused() -> None:
    with pytest.raises(UnsupportedModel, match="latent attention"):
        read_model_config(CONFIGS / "deepseek-v2-lite.json")
    hybrid = {
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "hidden_size": 512,
        "layer_types": ["linear_attention", "full_attention"],
    }
    with pytest.raises(UnsupportedModel, match="linear_attention"):
        shape_from_config(hybrid, Path("x"))


def test_multimodal_configs_are_read_from_text_config() -> None:
    llama = json.loads((CONFIGS / "llama-3-8b.json").read_text())
    shape = shape_from_config({"model_type": "llava", "text_config": llama}, Path("x"))
    assert shape.kv_heads == 8
    assert any("text_config" in caveat for caveat in shape.caveats)


def test_weights_estimates_match_published_parameter_counts() -> None:
    llama = estimate_parameters(read_model_config(CONFIGS / "llama-3-8b.json"))
    qwen = estimate_parameters(read_model_config(CONFIGS / "qwen2.5-0.5b-instruct.json"))
    assert llama == pytest.approx(8.03e9, rel=0.01)
    assert estimate_parameters(read_model_config(CONFIGS / "llama-2-7b.json")) == pytest.approx(
        6.74e9, rel=0.01
    )
    assert qwen == pytest.approx(0.494e9, rel=0.01)


def test_gpu_budget_is_the_share_of_the_card_less_the_weights() -> None:
    assert gpu_kv_cache_bytes(80 * GIB, 0.5, 10 * GIB, 2 * GIB) == 28 * GIB
    assert gpu_kv_cache_bytes(16 * GIB, 0.9, 20 * GIB) == 0
    with pytest.raises(ValueError, match="utilization"):
        gpu_kv_cache_bytes(16 * GIB, 1.5, GIB)


def test_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    config = str(CONFIGS / "llama-3-8b.json")
    args = ["--config", config, "--kv-cache-gib", "60", "--max-model-len", "8192"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "KV per token: 131,072 bytes" in out
    assert "30,720 of 16 tokens" in out
    assert "at full context (8,192 tokens): 59 sequences at once" in out
    assert "Maximum concurrency for 8,192 tokens per request: 60.00x" in out
    assert "not modelled:" in out
    assert "sliding-window" in out

    assert main([*args, "--block-size", "128", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["num_blocks"] == 3840
    assert figures["max_sequences_full_context"] == 59


def test_command_line_from_gpu_memory(capsys: pytest.CaptureFixture[str]) -> None:
    config = str(CONFIGS / "qwen2.5-0.5b-instruct.json")
    args = ["--config", config, "--gpu-memory-gib", "16", "--gpu-memory-utilization", "0.9"]
    assert main([*args, "--weights-gib", "1", "--max-model-len", "4096", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    # 16 × 0.9 − 1 = 13.4 GiB of 12,288-byte tokens, in blocks of 16.
    assert figures["kv_cache_bytes"] == math.floor(16 * GIB * 0.9) - GIB
    assert figures["kv_tokens"] == figures["kv_cache_bytes"] // (16 * 12_288) * 16
    # Without --weights-gib the weights are estimated from the config.
    assert main(args) == 0
    assert "estimated: 0.49 B parameters" in capsys.readouterr().out


def test_command_line_errors(capsys: pytest.CaptureFixture[str]) -> None:
    mla = str(CONFIGS / "deepseek-v2-lite.json")
    assert main(["--config", mla, "--kv-cache-gib", "1"]) == 2
    assert "latent attention" in capsys.readouterr().err
    missing = str(CONFIGS / "no-such-model.json")
    assert main(["--config", missing, "--kv-cache-gib", "1"]) == 2
    assert "error:" in capsys.readouterr().err
