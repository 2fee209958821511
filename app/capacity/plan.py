"""The capacity arithmetic: bytes per token, blocks, concurrent sequences.

It follows what vLLM does with a KV cache of a given size: the cache is cut
into blocks of ``block_size`` tokens across all layers (``num_blocks =
bytes // bytes_per_block``), a sequence holds whole blocks, and the
"Maximum concurrency" vLLM logs at start-up is ``num_blocks`` over the blocks
one sequence needs at ``max_model_len``. One block is vLLM's own (the null
block), so the sequences that really fit at once are one block's worth fewer
— which matters only for small caches.
"""

import math
from dataclasses import dataclass

from app.capacity.model import ModelShape

GIB = 1024**3
# vLLM's block pool sets one block aside at start-up (its "null block", a
# placeholder in block tables), so one block fewer holds tokens than it
# reports; its "Maximum concurrency" still counts all of them.
NULL_BLOCKS = 1
# Bytes per element of the KV cache, by the dtype names vLLM and configs use.
DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
}


def resolve_dtype(requested: str, shape: ModelShape) -> tuple[str, int]:
    """The KV cache dtype and its bytes per element.

    ``auto`` is the engine's rule: the checkpoint's dtype, except that
    float32 checkpoints (and configs that state none, which means float32)
    are served in 16-bit.
    """
    name = requested.lower().removeprefix("torch.")
    if name == "auto":
        config = (shape.config_dtype or "float32").lower().removeprefix("torch.")
        if DTYPE_BYTES.get(config, 4) == 4:
            return "16-bit (auto: a float32 checkpoint is served in 16-bit)", 2
        return config, DTYPE_BYTES[config]
    if name not in DTYPE_BYTES:
        raise ValueError(
            f"unknown dtype {requested!r}; one of auto, {', '.join(sorted(DTYPE_BYTES))}"
            " (quantized KV caches are not modelled)"
        )
    return name, DTYPE_BYTES[name]


def sequences_that_fit(num_blocks: int, block_size: int, tokens: int) -> int:
    """Sequences of ``tokens`` (prompt + output) that fit at once, every one
    at full length in whole blocks, beside the null block."""
    return max(0, num_blocks - NULL_BLOCKS) // math.ceil(tokens / block_size)


def kv_bytes_per_token(shape: ModelShape, bytes_per_element: int) -> int:
    """2 (K and V) × layers × KV heads × head dim × bytes per element."""
    return 2 * shape.layers * shape.kv_heads * shape.head_dim * bytes_per_element


def gpu_kv_cache_bytes(
    gpu_memory_bytes: int, utilization: float, weights_bytes: int, overhead_bytes: int = 0
) -> int:
    """What vLLM leaves for the KV cache on a GPU: its share of the card
    (``--gpu-memory-utilization``) less the weights and the other
    allocations its start-up profiling measures (``overhead_bytes``)."""
    if not 0 < utilization <= 1:
        raise ValueError(f"gpu memory utilization must be in (0, 1], not {utilization}")
    return max(0, math.floor(gpu_memory_bytes * utilization) - weights_bytes - overhead_bytes)


@dataclass(frozen=True)
class CapacityPlan:
    shape: ModelShape
    dtype: str
    bytes_per_element: int
    kv_cache_bytes: int
    block_size: int
    max_model_len: int

    @property
    def kv_bytes_per_token(self) -> int:
        return kv_bytes_per_token(self.shape, self.bytes_per_element)

    @property
    def bytes_per_block(self) -> int:
        return self.kv_bytes_per_token * self.block_size

    @property
    def num_blocks(self) -> int:
        return self.kv_cache_bytes // self.bytes_per_block

    @property
    def kv_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def blocks_per_sequence(self, tokens: int) -> int:
        """Whole blocks a sequence of ``tokens`` (prompt + output) holds."""
        return math.ceil(tokens / self.block_size)

    def max_concurrency(self, tokens: int) -> float:
        """vLLM's figure: blocks over the blocks one sequence needs (may be fractional)."""
        return self.num_blocks / self.blocks_per_sequence(tokens)

    def engine_reported_tokens(self) -> int:
        """The "KV cache size" vLLM logs and exports (``kv_cache_size_tokens``):
        its concurrency at ``max_model_len`` times that length, so it leaves
        out the unused tail of each sequence's last block."""
        return int(self.max_concurrency(self.max_model_len) * self.max_model_len)

    @property
    def usable_blocks(self) -> int:
        return max(0, self.num_blocks - NULL_BLOCKS)

    def max_sequences(self, tokens: int) -> int:
        """Sequences of ``tokens`` that fit at once, every one at full length."""
        return sequences_that_fit(self.num_blocks, self.block_size, tokens)


def plan_capacity(
    shape: ModelShape,
    kv_cache_bytes: int,
    max_model_len: int,
    block_size: int = 16,
    dtype: str = "auto",
) -> CapacityPlan:
    if block_size <= 0 or max_model_len <= 0 or kv_cache_bytes < 0:
        raise ValueError("block size and max model length must be positive, the cache not negative")
    name, size = resolve_dtype(dtype, shape)
    return CapacityPlan(shape, name, size, kv_cache_bytes, block_size, max_model_len)
