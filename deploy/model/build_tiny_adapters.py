"""Build LoRA adapters for the tiny model: PEFT's layout (an
``adapter_config.json`` and an ``adapter_model.safetensors``), rank 8 on
every layer's ``q_proj`` and ``v_proj``, random weights from a seed per
adapter (about 15 KB each).

vLLM serves them beside the tiny model (``--enable-lora --max-lora-rank 8
--lora-modules name=path``); each answers differently from the base model
and from the others, which is all the tests and the load tools need of
them. Nothing is downloaded.

Run it with the engine's Python after the tiny model is built:

    .venv-engine/bin/python deploy/model/build_tiny_adapters.py \
        --base .models/tiny --out .models/tiny-adapters --names a,b
"""

from __future__ import annotations

import argparse
import json
import zlib
from pathlib import Path

import torch
from safetensors.torch import save_file

RANK = 8
TARGETS = ("q_proj", "v_proj")


def adapter_weights(config: dict[str, int], seed: int) -> dict[str, torch.Tensor]:
    """Random A and B matrices for every layer's targets (B not zero, so the
    adapter changes what the model writes)."""
    hidden = config["hidden_size"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    outputs = {
        "q_proj": config["num_attention_heads"] * head_dim,
        "v_proj": config["num_key_value_heads"] * head_dim,
    }
    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for layer in range(config["num_hidden_layers"]):
        for target in TARGETS:
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{target}"
            a = torch.randn(RANK, hidden, generator=generator) * 0.05
            b = torch.randn(outputs[target], RANK, generator=generator) * 0.05
            weights[f"{prefix}.lora_A.weight"] = a.to(torch.bfloat16)
            weights[f"{prefix}.lora_B.weight"] = b.to(torch.bfloat16)
    return weights


def write_adapter(base: Path, out: Path, name: str) -> None:
    config = json.loads((base / "config.json").read_text())
    out.mkdir(parents=True, exist_ok=True)
    save_file(adapter_weights(config, zlib.crc32(name.encode())), out / "adapter_model.safetensors")
    adapter_config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": str(base),
        "r": RANK,
        "lora_alpha": 2 * RANK,
        "lora_dropout": 0.0,
        "target_modules": list(TARGETS),
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
    }
    (out / "adapter_config.json").write_text(json.dumps(adapter_config, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the tiny model's directory")
    parser.add_argument("--out", type=Path, required=True, help="one directory per adapter in it")
    parser.add_argument("--names", default="a,b", help="the adapters, comma-separated")
    args = parser.parse_args()
    for name in args.names.split(","):
        write_adapter(args.base, args.out / name, name)
    (args.out / ".ready").touch()


if __name__ == "__main__":
    main()
