"""The course's claims that the experiments measure against, in one place.

Two chapters of the course this project grew from: "Why Inference Servers
Exist" (batching, the n-sweep, two-stage degradation at 10× traffic) and
"Stage 1 — Core Concepts", the KV-cache capacity chapter (the formula).
"""

WHY_SERVERS = '"Why Inference Servers Exist"'
KV_CHAPTER = '"Stage 1 — Core Concepts" (the KV-cache capacity chapter)'

# Try It, Runs A and B: Qwen2.5-0.5B-Instruct in fp16 on a Colab T4, the same
# 32 prompts, 128 output tokens each, greedy. The chapter marks them
# "UNVERIFIED — needs a Colab T4 run".
BATCHING_SETUP = "Qwen2.5-0.5B-Instruct, fp16, Colab T4, 32 prompts × 128 tokens, greedy"
NAIVE_TOKENS_PER_S = 34.6
NAIVE_SECONDS = 118.4
BATCHED_TOKENS_PER_S = 593.8
BATCHED_SECONDS = 6.9

SWEEP_OBSERVATIONS = (
    "At n=1, vLLM's tokens/sec is unremarkable — possibly worse than the naive loop",
    "From n=1 to n=16, total tokens/sec rises close to linearly",
    "Wall-clock time for the whole batch barely changes as n grows",
    "Past some n, tokens/sec flattens and wall-clock starts climbing (compute-bound, or out of"
    " KV cache and queueing)",
)

FORMULA = "max concurrent seqs = (KV cache bytes available) ÷ (KV bytes per token) ÷ max_model_len"
PER_TOKEN = "2 × layers × kv_heads × head_dim × 2 bytes"
# The chapter's figures per token (16-bit), and its T4 example: ~14 GB left
# after 1 GB of weights, 1,000-token requests.
QWEN_KB_PER_TOKEN = 12
SEVEN_B_KB_PER_TOKEN = 128
T4_EXAMPLE = (
    "16 GB T4, 1 GB of weights, roughly 14 GB left for cache: at 12 KB per token and 1,000"
    " tokens per request, on the order of a thousand requests; at ~128 KB per token (a 7B"
    " model), about a hundred"
)

DEGRADATION = (
    "At 10× traffic a properly configured inference server degrades in two distinct stages —"
    " first gracefully, as per-user latency rises while the batch fills and throughput holds;"
    " then sharply, when KV cache runs out and the scheduler must start preempting running"
    " requests. The naive server's queue grows without bound and every user's latency climbs"
    " together."
)
