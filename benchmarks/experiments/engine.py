"""What the experiments read from the running engine over HTTP: its model,
its KV cache configuration (``vllm:cache_config_info``), the names of the
counters and gauges a measured run reads, and its count of a prompt's tokens."""

from dataclasses import dataclass

import httpx

from app.capacity.plan import sequences_that_fit
from deploy.local import scrape

# Counters and gauges read before and after each measured run.
PREEMPTIONS = "vllm:num_preemptions_total"
GENERATED = "vllm:generation_tokens_total"
QUEUE_TIME_SUM = "vllm:request_queue_time_seconds_sum"
QUEUE_TIME_COUNT = "vllm:request_queue_time_seconds_count"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"


@dataclass(frozen=True)
class EngineInfo:
    url: str
    model: str
    max_model_len: int
    # The model as the engine was given it (a local path for the tiny model).
    root: str
    cache: dict[str, str]

    @property
    def num_blocks(self) -> int:
        return int(self.cache["num_gpu_blocks"])

    @property
    def block_size(self) -> int:
        return int(self.cache["block_size"])

    @property
    def kv_tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def block_override(self) -> int | None:
        """``--num-gpu-blocks-override``, when the engine was sized in blocks."""
        raw = self.cache.get("num_gpu_blocks_override", "None")
        return None if raw == "None" else int(raw)

    @property
    def kv_cache_bytes(self) -> int | None:
        """The bytes the engine was given for its KV cache, when it says."""
        raw = self.cache.get("kv_cache_memory_bytes", "None")
        return None if raw == "None" else int(raw)

    @property
    def reported_concurrency(self) -> float:
        return float(self.cache["kv_cache_max_concurrency"])

    @property
    def tag(self) -> str:
        """Names the run's files: results depend on the cache's size."""
        return f"{self.num_blocks}-blocks"

    def sequences_that_fit(self, tokens: int) -> int:
        """Sequences of ``tokens`` the cache holds at once (the planner's rule)."""
        return sequences_that_fit(self.num_blocks, self.block_size, tokens)

    def describe(self) -> str:
        sized = (
            f"`--num-gpu-blocks-override {self.block_override}`"
            if self.block_override is not None
            else f"{(self.kv_cache_bytes or 0) / 1024**3:g} GiB (`VLLM_CPU_KVCACHE_SPACE`)"
        )
        return (
            f"engine `{self.url}`, model `{self.model}`, KV cache {self.num_blocks:,} blocks of"
            f" {self.block_size} tokens = {self.kv_tokens:,} tokens, sized by {sized},"
            f" max model length {self.max_model_len:,}"
        )


def engine_info(url: str) -> EngineInfo:
    """Fails with a clear message when nothing serves at ``url``."""
    try:
        models = httpx.get(f"{url}/v1/models", timeout=10).json()["data"]
        samples = scrape(url)
    except httpx.HTTPError as exc:
        raise SystemExit(f"no engine at {url} ({exc!r}): start the stack with `make up`") from exc
    (cache,) = [dict(s.labels) for s in samples if s.name == "vllm:cache_config_info"]
    first = models[0]
    return EngineInfo(url, first["id"], int(first["max_model_len"]), str(first["root"]), cache)


def prompt_tokens(url: str, model: str, prompt: str | list[dict[str, str]]) -> int:
    """The engine's own count of a prompt's tokens (a text, or chat messages
    with the chat template applied)."""
    key = "prompt" if isinstance(prompt, str) else "messages"
    response = httpx.post(f"{url}/tokenize", json={"model": model, key: prompt}, timeout=30)
    response.raise_for_status()
    return int(response.json()["count"])
