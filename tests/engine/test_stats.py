"""Reading the engine's /metrics: what is there, and saying what is not."""

from app.engine.stats import CACHE_CONFIG, KV_USAGE, PREEMPTIONS, parse_engine_stats

FULL = """
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",num_gpu_blocks="48",enable_prefix_caching="True"} 1.0
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="tiny"} 7.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 1.0
"""


def test_every_series_admission_reads() -> None:
    stats = parse_engine_stats(FULL)
    assert (stats.num_blocks, stats.block_size) == (48, 128)
    assert (stats.preemptions_total, stats.kv_usage) == (7.0, 0.25)
    assert (stats.running, stats.waiting) == (3.0, 1.0)
    assert stats.complete


def test_missing_series_are_named_not_read_as_zero() -> None:
    renamed = FULL.replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
    assert parse_engine_stats(renamed).missing == (KV_USAGE,)
    stats = parse_engine_stats("# an engine that exports nothing we know\nfoo 1\n")
    assert stats.missing == (CACHE_CONFIG, PREEMPTIONS, KV_USAGE)
    assert stats.num_blocks is None


def test_a_cache_config_without_its_labels_is_missing() -> None:
    text = FULL.replace('block_size="128",num_gpu_blocks="48",', "")
    assert parse_engine_stats(text).missing == (CACHE_CONFIG,)
