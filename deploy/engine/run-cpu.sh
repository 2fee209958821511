#!/usr/bin/env sh
# Start vLLM's OpenAI-compatible server on the CPU with the local tiny model.
# Used by `make up`, by the test suite and by the CPU container image.
# Every knob is an environment variable; unset ones keep the engine's default.
set -eu

: "${ENGINE_PYTHON:=.venv-engine/bin/python}"
: "${ENGINE_MODEL_DIR:=.models/tiny}"
: "${ENGINE_MODEL_NAME:=tiny}"
: "${ENGINE_HOST:=127.0.0.1}"
: "${ENGINE_PORT:=8001}"
: "${ENGINE_MAX_MODEL_LEN:=2048}"
: "${ENGINE_SCHEDULING_POLICY:=priority}"
# Without it the CPU backend tries to reserve most of the machine's memory.
: "${VLLM_CPU_KVCACHE_SPACE:=1}"
export VLLM_CPU_KVCACHE_SPACE
export PYTHONWARNINGS="${PYTHONWARNINGS:-ignore::DeprecationWarning,ignore::FutureWarning}"

set -- \
  --model "$ENGINE_MODEL_DIR" \
  --served-model-name "$ENGINE_MODEL_NAME" \
  --host "$ENGINE_HOST" \
  --port "$ENGINE_PORT" \
  --max-model-len "$ENGINE_MAX_MODEL_LEN" \
  --uvicorn-log-level warning \
  --scheduling-policy "$ENGINE_SCHEDULING_POLICY"
# The engine orders its queue by each request's priority, which the gateway
# sets from its class (GATEWAY_ENGINE_SCHEDULING=priority); fcfs: by arrival.
# Each answer's final usage carries the engine's own figures for the request
# (its queue time, its time to first token): ENGINE_PER_REQUEST_METRICS=0
# leaves them out.
if [ "${ENGINE_PER_REQUEST_METRICS:-1}" != 0 ]; then
  set -- "$@" --enable-per-request-metrics
fi
if [ -n "${ENGINE_KV_BLOCKS:-}" ]; then
  set -- "$@" --num-gpu-blocks-override "$ENGINE_KV_BLOCKS"
fi
if [ -n "${ENGINE_MAX_NUM_SEQS:-}" ]; then
  set -- "$@" --max-num-seqs "$ENGINE_MAX_NUM_SEQS"
fi
# A pooling engine (embeddings): ENGINE_RUNNER=pooling ENGINE_CONVERT=embed
# runs a generative model's weights as an embedding model (vLLM's
# --runner/--convert); unset, vLLM picks (a generative model generates).
if [ -n "${ENGINE_RUNNER:-}" ]; then
  set -- "$@" --runner "$ENGINE_RUNNER"
fi
if [ -n "${ENGINE_CONVERT:-}" ]; then
  set -- "$@" --convert "$ENGINE_CONVERT"
fi
# LoRA adapters: ENGINE_LORA_MODULES="name=path name=path" serves each beside
# the model (a request names one as its model), ENGINE_MAX_LORAS of them in
# the engine's slots at once (default 1), up to rank ENGINE_MAX_LORA_RANK (8).
if [ -n "${ENGINE_LORA_MODULES:-}" ]; then
  # shellcheck disable=SC2086
  set -- "$@" --enable-lora --max-loras "${ENGINE_MAX_LORAS:-1}" \
    --max-lora-rank "${ENGINE_MAX_LORA_RANK:-8}" --lora-modules $ENGINE_LORA_MODULES
fi
# KV cache events (what the engine caches and evicts, for the gateway's
# prefix routing): published on ENGINE_KV_EVENTS_PORT, their replay on the
# port after it (GATEWAY_KV_EVENTS_ENDPOINT / _REPLAY_ENDPOINT name them).
if [ -n "${ENGINE_KV_EVENTS_PORT:-}" ]; then
  replay=$((ENGINE_KV_EVENTS_PORT + 1))
  set -- "$@" --kv-events-config "{\"enable_kv_cache_events\": true, \"publisher\": \"zmq\", \"endpoint\": \"tcp://*:$ENGINE_KV_EVENTS_PORT\", \"replay_endpoint\": \"tcp://*:$replay\"}"
fi
# Traces: vLLM's llm_request span per request, a child of the gateway's
# engine call (the request's traceparent), sent over OTLP/gRPC unless
# OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf says otherwise.
if [ -n "${ENGINE_OTLP_TRACES_ENDPOINT:-}" ]; then
  set -- "$@" --otlp-traces-endpoint "$ENGINE_OTLP_TRACES_ENDPOINT"
fi
# The CPU engine busy-polls between its processes; on a small machine that
# starves whatever shares its cores (measured here on 2 cores: a sleeping
# process woke up to 1.2 s late while the engine generated). Keep it on
# ENGINE_CPUS (default: all cores but the last) so the gateway and its
# clients keep a core of their own.
if [ -z "${ENGINE_CPUS:-}" ] && command -v nproc >/dev/null; then
  cores=$(nproc)
  if [ "$cores" -ge 2 ]; then ENGINE_CPUS="0-$((cores - 2))"; fi
fi
pin=""
if [ -n "${ENGINE_CPUS:-}" ] && command -v taskset >/dev/null; then
  pin="taskset -c $ENGINE_CPUS"
fi

# Below the gateway's priority (ENGINE_NICE, default 10; 0 leaves it alone):
# where the engine's busy-polling threads share cores with the gateway (not
# pinned, or fewer cores than processes), the scheduler otherwise lets a
# waking gateway wait behind them — measured on 2 cores, unpinned, at 32
# non-streaming users: the gateway's thread waited 15.9 s for a core in a
# 12 s run and served 36% of what the engine served direct; with the engine
# at nice 10 it waited 0.13 s and served the same. The gateway needs little
# CPU, so the engine gives up little. Linux groups a session's processes
# (autogroup) and weighs niceness only inside the group: when this launcher
# leads its own session (make up, the tests), the group's niceness is set too.
: "${ENGINE_NICE:=10}"
niced=""
if [ "$ENGINE_NICE" != 0 ] && command -v nice >/dev/null; then
  niced="nice -n $ENGINE_NICE"
  if [ -w /proc/self/autogroup ] && [ "$(cut -d" " -f6 /proc/$$/stat 2>/dev/null)" = "$$" ]; then
    echo "$ENGINE_NICE" >/proc/self/autogroup 2>/dev/null || true
  fi
fi

# ENGINE_EXTRA_ARGS: further engine flags, split on spaces.
# shellcheck disable=SC2086
exec $niced $pin "$ENGINE_PYTHON" -m vllm.entrypoints.openai.api_server "$@" ${ENGINE_EXTRA_ARGS:-}
