"""Reading a model's config.json for the capacity planner
(``app.capacity.model``): real models' configs (tests/data/model_configs/,
written from the published config.json files) give their layers, KV heads
and head size, the kind of attention, what the formula leaves out, and what
it cannot fit at all."""

import json
from pathlib import Path

import pytest

from app.capacity import UnsupportedModel, plan_capacity, read_model_config
from app.capacity.model import shape_from_config
from app.capacity.plan import GIB
from tests.support.model_configs import CONFIGS


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
