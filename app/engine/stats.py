"""What the gateway reads from the engine's ``/metrics``.

Admission control needs the KV cache's size (``vllm:cache_config_info``
carries ``num_gpu_blocks`` and ``block_size`` as labels), the preemption
counter and KV usage; routing and the sequence cap use the running and
waiting counts; adapter routing, which LoRA adapters the engine has in its
slots (``vllm:lora_requests_info``). An engine whose metrics lack some of these (a renamed series
after an upgrade, another engine) is reported as such — ``missing`` names
them — rather than read as zeros.
"""

from dataclasses import dataclass

from app.observe.promtext import Sample, parse, present, total

CACHE_CONFIG = "vllm:cache_config_info"
PREEMPTIONS = "vllm:num_preemptions_total"
KV_USAGE = "vllm:kv_cache_usage_perc"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
# What preemption costs is weighed against what the engine generates.
GENERATED = "vllm:generation_tokens_total"
# Its waiting requests by why they wait: "capacity" (no room: the sequence
# cap, the KV cache) or "deferred" (a LoRA slot, a KV transfer).
WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
LORA_INFO = "vllm:lora_requests_info"
# What admission's capacity model cannot do without.
REQUIRED = (CACHE_CONFIG, PREEMPTIONS, KV_USAGE)
_READ = (*REQUIRED, RUNNING, WAITING, WAITING_BY_REASON, LORA_INFO, GENERATED)


@dataclass(frozen=True)
class LoraSlots:
    """The engine's LoRA adapter slots (``--max-loras``) and the adapters
    its requests use: running, and waiting (for a slot among other things).
    An adapter in neither may still be loaded in a slot, but nothing says so."""

    slots: int
    running: frozenset[str]
    waiting: frozenset[str]

    @property
    def active(self) -> frozenset[str]:
        return self.running | self.waiting


@dataclass(frozen=True)
class EngineStats:
    num_blocks: int | None
    block_size: int | None
    preemptions_total: float
    kv_usage: float
    running: float
    waiting: float
    missing: tuple[str, ...] = ()
    # Whether the running and waiting counts were read (not merely absent:
    # admission's learned sequence cap needs the real ones).
    counts_seen: bool = True
    # None: the engine serves no LoRA adapters (started without --enable-lora).
    lora: LoraSlots | None = None
    # Of ``waiting``, those waiting for room (not for a LoRA slot): what
    # says the engine runs all it may. All of them where the engine does
    # not say why they wait.
    waiting_for_room: float | None = None
    # Tokens it has generated since it started (None: it does not say).
    generated_total: float | None = None

    @property
    def waiting_for_capacity(self) -> float:
        return self.waiting if self.waiting_for_room is None else self.waiting_for_room

    @property
    def complete(self) -> bool:
        return not self.missing


def parse_engine_stats(text: str) -> EngineStats:
    samples = parse(text, _READ)
    num_blocks = block_size = None
    for sample in samples:
        if sample.name == CACHE_CONFIG:
            num_blocks = _int(sample.labels.get("num_gpu_blocks"))
            block_size = _int(sample.labels.get("block_size"))
    missing = [name for name in REQUIRED if not present(samples, name)]
    if CACHE_CONFIG not in missing and (num_blocks is None or block_size is None):
        missing.insert(0, CACHE_CONFIG)
    return EngineStats(
        num_blocks=num_blocks,
        block_size=block_size,
        preemptions_total=total(samples, PREEMPTIONS),
        kv_usage=total(samples, KV_USAGE),
        running=total(samples, RUNNING),
        waiting=total(samples, WAITING),
        missing=tuple(missing),
        counts_seen=present(samples, RUNNING) and present(samples, WAITING),
        lora=_lora_slots(samples, busy=total(samples, RUNNING) + total(samples, WAITING) > 0),
        waiting_for_room=(
            total(samples, WAITING_BY_REASON, {"reason": "capacity"})
            if present(samples, WAITING_BY_REASON)
            else None
        ),
        generated_total=total(samples, GENERATED) if present(samples, GENERATED) else None,
    )


def _lora_slots(samples: list[Sample], busy: bool) -> LoraSlots | None:
    """vLLM sets ``vllm:lora_requests_info`` to the time of its last stats,
    with the adapters as comma-separated labels, and never removes an old
    label set: the current state is the series with the largest value. An
    idle engine may not have written one since its last request ended: with
    nothing running or waiting, no adapter is in use, whatever it says."""
    info = [s for s in samples if s.name == LORA_INFO]
    if not info:
        return None
    latest = max(info, key=lambda s: s.value).labels
    slots = _int(latest.get("max_lora"))
    if slots is None:
        return None
    if not busy:
        return LoraSlots(slots, frozenset(), frozenset())
    return LoraSlots(
        slots,
        _names(latest.get("running_lora_adapters")),
        _names(latest.get("waiting_lora_adapters")),
    )


def _names(label: str | None) -> frozenset[str]:
    return frozenset(name for name in (label or "").split(",") if name)


def _int(value: str | None) -> int | None:
    try:
        return int(float(value)) if value is not None else None
    except ValueError:
        return None
