#!/usr/bin/env sh
# Start the local trace backend: Arize Phoenix, an OpenTelemetry trace store
# with a UI and a REST API, installed from PyPI into .venv-traces
# (`make trace-backend`). It takes OTLP over HTTP on TRACES_PORT
# (/v1/traces, the UI and the API on the same port) and over gRPC on
# TRACES_GRPC_PORT, and keeps its spans in SQLite under TRACES_DIR.
# Used by `make up` and by the test suite.
set -eu

: "${TRACES_BIN:=.venv-traces/bin/phoenix}"
: "${TRACES_HOST:=127.0.0.1}"
: "${TRACES_PORT:=6006}"
: "${TRACES_GRPC_PORT:=4317}"
: "${TRACES_DIR:=.cache/traces}"
# Traces older than this many days are deleted (weekly, Sunday 00:00 UTC):
# a trace store that never forgets fills its disk. 0 keeps them all. Set
# when the store is first made (its default project's retention policy).
: "${TRACES_RETENTION_DAYS:=7}"
mkdir -p "$TRACES_DIR"

# Nothing from the internet on its own initiative (telemetry, web fonts, a
# sandbox binary it would fetch at start): a trace store needs none of it.
PHOENIX_HOST="$TRACES_HOST" PHOENIX_PORT="$TRACES_PORT" PHOENIX_GRPC_PORT="$TRACES_GRPC_PORT" \
PHOENIX_WORKING_DIR="$TRACES_DIR" PHOENIX_TELEMETRY_ENABLED=false \
PHOENIX_ALLOW_EXTERNAL_RESOURCES=false \
PHOENIX_DEFAULT_RETENTION_POLICY_DAYS="$TRACES_RETENTION_DAYS" \
  exec "$TRACES_BIN" serve
