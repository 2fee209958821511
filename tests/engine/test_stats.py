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


# As vLLM 0.32 exports it with --enable-lora --max-loras 2: one label set per
# state it has been in, each set to the time it was last current.
LORA = """
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""} 1.7649e9
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a,b",waiting_lora_adapters="c"} 3e9
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a",waiting_lora_adapters=""} 1.76490e9
"""


def test_the_adapters_are_the_latest_label_set() -> None:
    lora = parse_engine_stats(FULL + LORA).lora
    assert lora is not None
    assert lora.slots == 2
    assert (lora.running, lora.waiting) == (frozenset({"a", "b"}), frozenset({"c"}))
    assert lora.active == {"a", "b", "c"}


def test_an_engine_without_lora_has_no_slots() -> None:
    assert parse_engine_stats(FULL).lora is None
    idle = parse_engine_stats(FULL + LORA.replace("3e9", "1.0").replace("1.76490e9", "2.0")).lora
    assert idle is not None
    assert idle.active == frozenset()


def test_only_requests_waiting_for_room_say_the_engine_is_full() -> None:
    by_reason = (
        "# TYPE vllm:num_requests_waiting_by_reason gauge\n"
        'vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 0.0\n'
        'vllm:num_requests_waiting_by_reason{engine="0",reason="deferred"} 1.0\n'
    )
    assert parse_engine_stats(FULL + by_reason).waiting_for_capacity == 0.0
    # An engine that does not say why: all its waiting requests.
    assert parse_engine_stats(FULL).waiting_for_capacity == 1.0


def test_an_idle_engine_uses_no_adapter_whatever_its_last_label_set_says() -> None:
    idle = FULL.replace("} 3.0", "} 0.0").replace("} 1.0\n", "} 0.0\n")
    lora = parse_engine_stats(idle + LORA).lora
    assert lora is not None
    assert lora.slots == 2
    assert lora.active == frozenset()
