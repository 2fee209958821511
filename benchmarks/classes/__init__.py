"""What admission buys with service classes and TTFT objectives, against vLLM alone.

    make bench-classes                      # or: .venv/bin/python -m benchmarks.classes
    make bench-classes BENCH_ARGS="--parts mixed,eviction --rounds 3"
    make bench-classes BENCH_ARGS="--gateway-src /tmp/gw-before"   # an older commit

Starts its own engines (``deploy/engine/run-cpu.sh``: CPU, tiny model) and,
for every run through a gateway, a fresh gateway as ``make up`` sets it
(``deploy.stack.gateway_environment``: the model's tokenizer files, as many
sequences as the engine runs, the engine ordering by priority, its KV cache
events; ``/metrics`` on an admin port), laid out as ``make up`` lays them
out (the engines on the launcher's cores, the gateways and this client on
the core they leave). Each part runs ``--rounds`` rounds; in a round every
target of the part runs once, in an order rotated from round to round. Every
table gives each figure as the median of the rounds with their range
(min–max), pairs ratios and differences with the anchor of the same round —
vLLM direct at its best for the part — and carries vLLM direct once more
(``again``): the band two runs of one target differ by. Each round's rows
follow the medians.

Definitions. A request's objective T is its kind's (its class's default, or
what its ``x-slo-ttft-ms`` asks). It is **met** when it completed and its
first content byte arrived within T of its send. A kind's **attainment** is
met ÷ sent: refused, evicted, failed and cut requests are misses.
**Goodput** is the completion tokens of met requests over a fixed window —
the load's schedule plus a drain of the longest T, after which whatever
still runs is cut — per second, per kind and in total. In TTFT percentiles a
request that got no first token counts as +inf (∞ in the tables).

Parts (``--parts``; sizes are options, ``--help`` lists them):

1. *mixed* (``benchmarks.classes.mixed``): 32 bulk users (class low, fixed
   150-word documents, ``max_tokens`` 200, ``ignore_eos``) and 4 chat users
   (class high, ``max_tokens`` 24, 0.3 s think time), closed loop, 180 s, on
   ``make up``'s engine (24 KV blocks, max-num-seqs 128). Chat is judged by
   a 1 s objective, bulk by 30 s. Targets: vLLM direct ordering by arrival
   (``direct-fcfs``), by priority with the class in the body (the anchor),
   the same again, the gateway, the gateway with admission off.
2. *objectives* (``benchmarks.classes.objectives``): open-loop Poisson
   arrivals at 2× the engine's capacity (measured first, or
   ``--capacity-rps``) for 180 s: a fifth ask for 1 s (class high), the rest
   for 10 s (normal). Refusals by reason, and whether any came while the
   engine had room (its running sequences and KV use sampled each second).
3. *tenants* (``benchmarks.classes.tenants``): tenant A with 40 closed-loop
   users beside tenant B with 4, one class, a 10 s objective each.
4. *eviction* (``benchmarks.classes.eviction``): an engine of 16 sequences
   with plenty of KV cache, all of them running long low requests, then a
   burst of 8 high requests asking for 1 s: the burst's attainment, the
   gateway's evictions (``gateway_evictions_total``, when it exports it) and
   every low client's outcome, which must be exactly one.

A default run is 5 rounds of: mixed, 5 targets × (180 s + up to 30 s of
drain); objectives, the capacity run, then 4 targets × (180 s + 10 s);
tenants, 4 × (180 s + 10 s); eviction, 3 runs of up to 120 s — about four
hours with the engines' starts and the idle waits between runs. Prints the
tables and writes ``result.json`` (every run), ``tables.md``,
``summary.md`` and every process's log under ``--out`` (default
``reports/classes-<time>``).
"""
