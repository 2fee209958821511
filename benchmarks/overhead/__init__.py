"""What the gateway costs on the hot path beside vLLM's own router, and where overload waits.

    make bench-overhead                    # or: .venv/bin/python -m benchmarks.overhead
    make bench-overhead BENCH_ARGS="--layout both"                  # pinned and unpinned
    make bench-overhead BENCH_ARGS="--gateway-src /tmp/gw-before"   # an older commit
    .venv/bin/python -m benchmarks.overhead --compare BEFORE.json AFTER.json

Starts its own engine (CPU, tiny model) with a KV cache large enough that 64
streams never preempt (``VLLM_CPU_KVCACHE_SPACE=2`` GiB, no block override,
``--max-num-seqs 128``), so what differs between the targets is the relay,
not admission. In front of it: vLLM's own router (``vllm-router``, Rust,
the ``bench`` extra; its defaults), nginx (one worker, nothing buffered:
the floor of what a relay costs) and gateways run from ``--gateway-src``
(default: this repository; a ``git worktree`` of an older commit measures
that commit with the same harness). The default targets: vLLM direct,
vllm-router, nginx and the gateway as ``make up`` sets it (``--targets``;
``targets.TARGETS`` lists the gateway's other settings: admission off,
prompts counted by the engine, estimated, ...);
``traced`` adds a gateway with admission on that traces every request into
the local trace backend, which the benchmark then starts (``make
trace-backend`` installs it): the cost of tracing on, beside ``on``, off.

Layouts (``--layout``): *unpinned* (the default) starts the engine on every
core (``ENGINE_CPUS=0-1`` on two), shared with the proxies and the client —
the engine's busy polling then competes with whatever relays, and a relay
that costs more CPU per token shows it in throughput and tail latency;
*pinned* keeps the engine on all cores but the last, as ``make up`` does,
and leaves that core to the proxies and the client — the engine is then
the bottleneck and every relay reads close to 1.0; *both* runs one after
the other, each with its own processes. Every table says its layout.

Parts (``--parts``):

1. *rows*: closed-loop streaming users (1, 8, 32, 64) and a non-streaming
   row, ``max_tokens`` 128, ``ignore_eos``, unique prompts; each row runs
   against every target in rotated order, ``--repeats`` rounds of
   ``--seconds``, the first fifth (at most 2 s) left out. Per row and
   target, as the median of the rounds with their min–max: tok/s (tokens
   whose chunk arrived in the window), the throughput ratio to the direct
   run of the same round, TTFT p99 per round, and CPU seconds per 1,000
   tokens of the relaying process (the router's or the gateway's tree),
   of vLLM's API server and of the client (this process), all read from
   /proc where the window begins and ends and divided by the tokens that
   arrived inside it; pooled TTFT p50/p99 and what a relay adds to them,
   each request's residual (its TTFT less the engine's own queue and time
   to first token, from vLLM's per-request metrics in the final usage
   chunk) at p50/p99 and what it adds to direct's — the relay's added
   latency with the engine's own variation taken out — ITL p50/p99, and
   tokens per chunk (above 1 when the sender merged tokens into one
   chunk). Every run is kept in ``result.json``.
2. *profile*: py-spy on a gateway at 32 streams; the raw stacks are kept and
   summarised (busy share, top frames by share, share by package).
3. *overload*: 256 closed-loop users, ``max_tokens`` 256, against every
   target: served TTFT, 429s, and where the excess waits — the engine's
   ``vllm:num_requests_waiting`` against the gateway's
   ``gateway_queue_depth``, both sampled every second.
4. *vllm-bench*: vLLM's own client (``vllm bench serve``, run in the
   engine's environment) against every target: random dataset 128 in /
   128 out, 320 prompts at concurrency 32, seeds 1 and 2, targets in
   rotated order per seed; its output tok/s and TTFT p50/p99 per seed.

How long a default run takes (one layout, unpinned; measured on the
project's machine kind, two cores): starting the engine ~1.5 min, the
router and gateways and the warm-up ~0.5 min; rows: 5 rows × 4 targets × 5
rounds = 100 runs of 10 s plus ~2 s each (the engine idling, requests still
running at the end) ≈ 20 min; profile ~0.5 min; overload: 4 runs of 45 s
plus ~15 s (the queue draining) ≈ 4 min; vllm-bench: 2 seeds × 4 targets
= 8 runs of ~15 s to import vLLM and ~15 s to send 40,960 tokens ≈ 4 min.
About 30 minutes in all. Ten seconds is the shortest cell in which a
64-stream row still measures whole requests started after the settling
time (a request of 128 tokens takes 3–6 s there); fewer rows or rounds
would not give five paired rounds of each. ``--layout both`` takes about
twice that and more, the pinned engine being slower.

Only settings every gateway version understands are passed
(``GATEWAY_HOST``, ``GATEWAY_PORT``, ``GATEWAY_UPSTREAM_URL``,
``GATEWAY_ADMISSION``); ``--gateway-env K=V`` adds more, ``--router-args``
passes flags to the router. Prints the tables and writes ``result.json``,
``tables.md``, the profiles, vLLM's benchmark results and every process's
log under ``--out`` (default ``reports/overhead-<time>``).
"""
