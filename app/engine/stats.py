"""What the gateway reads from the engine's ``/metrics``.

Only the few series admission control needs are parsed: the KV cache's size
(``vllm:cache_config_info`` carries ``num_gpu_blocks`` and ``block_size`` as
labels), the preemption counter and KV usage.
"""

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

_WANTED = (
    "vllm:cache_config_info",
    "vllm:num_preemptions_total",
    "vllm:kv_cache_usage_perc",
)


@dataclass(frozen=True)
class EngineStats:
    num_blocks: int | None
    block_size: int | None
    preemptions_total: float
    kv_usage: float


def parse_engine_stats(text: str) -> EngineStats:
    # Parse only the lines of interest: the engine exports hundreds.
    lines = "\n".join(line for line in text.splitlines() if line.startswith(_WANTED))
    num_blocks = block_size = None
    sums = dict.fromkeys(_WANTED[1:], 0.0)
    for family in text_string_to_metric_families(lines):
        for sample in family.samples:
            if sample.name == "vllm:cache_config_info":
                num_blocks = _int(sample.labels.get("num_gpu_blocks"))
                block_size = _int(sample.labels.get("block_size"))
            elif sample.name in sums:
                sums[sample.name] += sample.value
    return EngineStats(
        num_blocks=num_blocks,
        block_size=block_size,
        preemptions_total=sums["vllm:num_preemptions_total"],
        kv_usage=sums["vllm:kv_cache_usage_perc"],
    )


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
