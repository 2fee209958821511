"""KV-cache capacity planning from a model's ``config.json``.

The arithmetic vLLM does when it sizes its paged KV cache, done before a GPU
is rented:

    KV bytes per token = 2 (K and V) × layers × KV heads × head dim × bytes per element
    blocks             = floor(KV cache bytes / (KV bytes per token × block size))
    max concurrent     = blocks ÷ blocks one sequence needs at the given length

``python -m app.capacity --help`` is the command-line tool. This package is
standalone: it imports nothing else from ``app`` and nothing outside the
standard library, so it runs wherever Python does.
"""

from app.capacity.model import ModelShape, UnsupportedModel, read_model_config
from app.capacity.plan import CapacityPlan, gpu_kv_cache_bytes, plan_capacity

__all__ = [
    "CapacityPlan",
    "ModelShape",
    "UnsupportedModel",
    "gpu_kv_cache_bytes",
    "plan_capacity",
    "read_model_config",
]
