"""What the capacity arithmetic needs from a Hugging Face ``config.json``.

Configs name the same quantity differently across model families (GPT-2's
``n_layer``, Falcon's ``n_head_kv``, multimodal wrappers that nest the
language model under ``text_config``); this module reads those spellings into
one ``ModelShape`` and says which features of the config the arithmetic does
not model.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")
HEAD_KEYS = ("num_attention_heads", "n_head", "num_heads")
KV_HEAD_KEYS = ("num_key_value_heads", "num_kv_heads", "n_head_kv")
HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model")
INTERMEDIATE_KEYS = ("intermediate_size", "n_inner", "ffn_dim")
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
ATTENTION_LAYER_TYPES = {"full_attention", "sliding_attention"}


class UnsupportedModel(ValueError):
    """The config describes an attention the formula does not fit."""


@dataclass(frozen=True)
class ModelShape:
    """The parts of a model's architecture that decide its KV cache size."""

    name: str
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    hidden_size: int
    config_dtype: str | None
    max_position_embeddings: int | None
    # For the weights estimate only (the KV cache does not depend on them).
    vocab_size: int | None = None
    intermediate_size: int | None = None
    tie_word_embeddings: bool = False
    experts: int = 0
    quantized_weights: bool = False
    # Features of this config that the arithmetic does not model.
    caveats: tuple[str, ...] = field(default=())

    @property
    def attention_kind(self) -> str:
        if self.kv_heads == self.attention_heads:
            return "multi-head"
        if self.kv_heads == 1:
            return "multi-query"
        return "grouped-query"


def _first_int(config: Mapping[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _required(config: Mapping[str, Any], keys: tuple[str, ...], path: Path) -> int:
    value = _first_int(config, keys)
    if value is None or value <= 0:
        raise ValueError(f"{path}: none of {', '.join(keys)} is a positive integer")
    return value


def _language_model(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """Multimodal configs keep the language model's shape under ``text_config``."""
    text = config.get("text_config")
    if _first_int(config, LAYER_KEYS) is None and isinstance(text, Mapping):
        return text
    return config


def _refuse_unmodelled_attention(config: Mapping[str, Any], path: Path) -> None:
    if config.get("kv_lora_rank") is not None:
        raise UnsupportedModel(
            f"{path}: multi-head latent attention (kv_lora_rank, DeepSeek-style) caches one"
            " compressed latent per token and layer, not K and V per head; this planner"
            " does not model it"
        )
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list):
        others = sorted({str(kind) for kind in layer_types} - ATTENTION_LAYER_TYPES)
        if others:
            raise UnsupportedModel(
                f"{path}: layers of type {', '.join(others)} (linear attention or state-space"
                " layers) keep state that this planner does not model"
            )


def _sliding_window_caveat(config: Mapping[str, Any], layers: int) -> str | None:
    window = config.get("sliding_window")
    if not isinstance(window, int) or config.get("use_sliding_window") is False:
        return None
    layer_types = config.get("layer_types")
    if isinstance(layer_types, list):
        sliding = sum(1 for kind in layer_types if kind == "sliding_attention")
        if sliding == 0:
            return None
        which = f"{sliding} of {layers} layers"
    else:
        which = "its layers"
    return (
        f"sliding-window attention: {which} attend to the last {window:,} tokens only; vLLM"
        " can keep less KV for them, and this plan counts every layer at full length, so it"
        " understates capacity for sequences longer than the window"
    )


def shape_from_config(config: Mapping[str, Any], path: Path) -> ModelShape:
    """The ``ModelShape`` of a parsed config (``path`` is for messages)."""
    _refuse_unmodelled_attention(config, path)
    lm = _language_model(config)
    _refuse_unmodelled_attention(lm, path)
    layers = _required(lm, LAYER_KEYS, path)
    heads = _required(lm, HEAD_KEYS, path)
    hidden = _required(lm, HIDDEN_KEYS, path)
    kv_heads = _first_int(lm, KV_HEAD_KEYS)
    if kv_heads is None:
        # Falcon marks multi-query attention with a flag instead of a count.
        kv_heads = 1 if lm.get("multi_query") is True else heads
    # An explicit head_dim wins: several families (Gemma, Qwen3, Mistral
    # Nemo) set it to something other than hidden_size / heads.
    head_dim = _first_int(lm, ("head_dim",))
    if head_dim is None:
        if hidden % heads:
            raise ValueError(f"{path}: hidden size {hidden} is not a multiple of {heads} heads")
        head_dim = hidden // heads
    caveats = []
    window = _sliding_window_caveat(lm, layers)
    if window:
        caveats.append(window)
    if lm is not config:
        caveats.append("read from text_config: any vision or audio encoder is not counted")
    dtype = lm.get("torch_dtype") or lm.get("dtype") or config.get("torch_dtype")
    architectures = config.get("architectures") or []
    name = str(config.get("model_type") or (architectures[0] if architectures else "model"))
    return ModelShape(
        name=name,
        layers=layers,
        attention_heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        hidden_size=hidden,
        config_dtype=str(dtype) if dtype else None,
        max_position_embeddings=_first_int(lm, ("max_position_embeddings", "n_positions")),
        vocab_size=_first_int(lm, ("vocab_size",)) or _first_int(config, ("vocab_size",)),
        intermediate_size=_first_int(lm, INTERMEDIATE_KEYS),
        tie_word_embeddings=bool(
            lm.get("tie_word_embeddings", config.get("tie_word_embeddings", False))
        ),
        experts=_first_int(lm, EXPERT_KEYS) or 0,
        quantized_weights="quantization_config" in config or "quantization_config" in lm,
        caveats=tuple(caveats),
    )


def read_model_config(path: Path) -> ModelShape:
    """Read ``config.json`` (or the directory holding it)."""
    if path.is_dir():
        path = path / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(config, dict):
        raise ValueError(f"{path}: not a JSON object")
    return shape_from_config(config, path)
