"""Routing between two engines: least loaded, prefix affinity on the prompt's
key, prefix routing on what the engines report holding (their KV cache
events), and vLLM's own router's cache-aware policies — over the same
engines.

    make bench-prefix                      # or: .venv/bin/python -m benchmarks.prefix

Starts two engines with a small KV cache each (``--kv-blocks``, 48 blocks of
128 tokens), both publishing their KV cache events and both pinned to the
engine core (they share it: the comparison is between routings, on the same
engines), and in front of both one gateway per gateway setting
(``GATEWAY_UPSTREAM_URLS``; ``GATEWAY_ROUTING``,
``GATEWAY_PREFIX_AWARE_DEMAND``, ``GATEWAY_KV_EVENTS_*``) and one vllm-router
per router policy (``cache_aware``: its own radix tree of the prompts it
sent; ``kv_aware``: the engines' KV cache events); the runs take turns, one
at a time (``--settings`` picks some).

Prompts (``--prompts``): ``ids`` (the default) sends each request as the token
ids of the chat it stands for (the tiny model's chat template rendered,
tokenized once per run by the engine's ``/tokenize``) on ``/v1/completions``:
the same requests for the gateways and vllm-router, nothing to count; ``chat``
sends the chat itself, whose tokens the gateways count (the engine's
``/tokenize``, their default) and route on. "prefix key" is what KV-event
routing falls back to (``gateway_routing_kv_fallbacks_total``): the same
gateway routing without events.

1. *RAG mix*: a few long shared documents (``--docs``), many short
   questions: closed-loop streaming users, each request a random document and
   a new question. Per setting: the engines' prefix cache hit rate
   (``vllm:prefix_cache_hits_total`` over ``vllm:prefix_cache_queries_total``,
   deltas summed over both engines), TTFT p50/p99, throughput, preemptions.
2. *Skewed mix*: one hot document takes ``--hot-share`` of the requests.
   What runs on each engine is sampled every second — the gateway's
   ``gateway_engine_requests_in_flight{engine}``, or for vllm-router each
   engine's running and waiting requests: the busiest engine against the
   mean of both, beside the cap prefix routing promises
   (``GATEWAY_ROUTING_LOAD_FACTOR`` times the fair share, or the fair share
   plus ``GATEWAY_ROUTING_LOAD_SLACK``); affinity hits and load-cap
   overrides.
3. *Estimate* (``chat`` prompts): prefix-aware demand counts a shared prefix
   of a text prompt in tokens estimated from its text. The estimate a gateway
   fits on the run's requests (their characters against the engine's
   ``usage.prompt_tokens``, from the access log) is compared with what the
   engine counts for each document alone.

Every run draws documents of its own, so no run finds the caches warmed by
an earlier one. Settings take turns in rotated order for ``--repeats`` rounds.
Prints the tables and writes ``result.json``, ``tables.md`` and every
process's log under ``--out``.
"""
