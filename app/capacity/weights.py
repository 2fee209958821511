"""The weights' memory, for sizing the KV cache from a GPU's memory.

The checkpoint's own files are the best measure when they sit next to the
config; otherwise a parameter count is estimated from the config for dense
decoder-only models with a gated MLP (Llama, Qwen, Mistral, Gemma). Mixtures
of experts and quantized checkpoints get no estimate: the caller must say.
"""

from pathlib import Path

from app.capacity.model import ModelShape

# safetensors first; PyTorch .bin files only for checkpoints without them.
WEIGHT_SUFFIXES = (".safetensors", ".bin")
# Smaller files are Git LFS pointers or indexes, not weights.
POINTER_BYTES = 1024


def estimate_parameters(shape: ModelShape) -> int | None:
    """Parameters of a dense decoder with a gated MLP, biases left out
    (they are well under 1% of any such model)."""
    if shape.experts > 1 or shape.quantized_weights:
        return None
    if shape.vocab_size is None or shape.intermediate_size is None:
        return None
    hidden = shape.hidden_size
    q_width = shape.attention_heads * shape.head_dim
    kv_width = shape.kv_heads * shape.head_dim
    attention = 2 * hidden * q_width + 2 * hidden * kv_width  # q and o; k and v
    mlp = 3 * hidden * shape.intermediate_size  # gate, up, down
    norms = 2 * hidden
    per_layer = attention + mlp + norms
    embeddings = shape.vocab_size * hidden * (1 if shape.tie_word_embeddings else 2)
    return shape.layers * per_layer + embeddings + hidden


def weights_bytes_on_disk(config_path: Path) -> int | None:
    """Total size of the checkpoint's weight files beside ``config.json``,
    or None when there are none (or only LFS pointers)."""
    folder = config_path if config_path.is_dir() else config_path.parent
    for suffix in WEIGHT_SUFFIXES:
        sizes = [p.stat().st_size for p in folder.glob(f"*{suffix}") if p.is_file()]
        if sizes:
            return None if min(sizes) < POINTER_BYTES else sum(sizes)
    return None
