# The gateway image: `python -m app` on port 8000, settings from GATEWAY_*
# environment variables (see the README's configuration table).
#
#   make image    # docker build -t vllm-gateway:<version> . (app/__init__.py's version)
#   docker run -p 8000:8000 -e GATEWAY_UPSTREAM_URL=http://engine-host:8000 vllm-gateway:<version>
#
# `docker run vllm-gateway:<version> settings` prints the settings it would run with.
#
# Dependencies come from requirements/runtime.lock, the lock the test suite's
# environment is built against (requirements/dev.lock is compiled with
# `-c requirements/runtime.lock`), so the image runs the versions the tests ran.

# The base of both stages; a mirror's copy or a local stand-in may replace it
# (compose passes PYTHON_IMAGE).
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# --- build: a virtual environment with the locked dependencies and the app ---
FROM ${PYTHON_IMAGE} AS build

ENV PIP_DISABLE_PIP_VERSION_CHECK=1

RUN python -m venv /venv
ENV PATH=/venv/bin:$PATH

WORKDIR /src
COPY requirements/runtime.lock requirements/runtime.lock
RUN pip install --no-cache-dir -r requirements/runtime.lock

COPY pyproject.toml README.md LICENSE ./
COPY app app
RUN pip install --no-cache-dir --no-deps .

# --- runtime: the same base, the environment, no build tools ---
FROM ${PYTHON_IMAGE}

RUN groupadd --system --gid 10001 gateway \
 && useradd --system --uid 10001 --gid gateway --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin gateway

COPY --from=build /venv /venv

ENV PATH=/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    GATEWAY_HOST=0.0.0.0 \
    GATEWAY_PORT=8000 \
    GATEWAY_UPSTREAM_URL=http://vllm:8000

# `python -m` puts the working directory first on sys.path: keep it empty.
WORKDIR /srv/gateway
# The Batch API's files and state (GATEWAY_BATCH_DIR, data/batches under
# here): the gateway's user writes them. Mount a volume at /srv/gateway/data
# to keep them past the container (docs/batches.md).
RUN mkdir data && chown 10001:10001 data
USER 10001:10001
EXPOSE 8000

# Liveness only: readiness (/health/ready) also depends on the engine.
HEALTHCHECK --interval=10s --timeout=5s --start-period=15s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('GATEWAY_PORT', '8000') + '/health/live', timeout=3)"]

# The gateway handles SIGTERM itself: readiness off, in-flight requests drain
# for GATEWAY_DRAIN_GRACE_SECONDS, then it exits. Give `docker stop` more time
# than GATEWAY_SHUTDOWN_TIMEOUT (docker-compose.yml does: stop_grace_period).
STOPSIGNAL SIGTERM
ENTRYPOINT ["python", "-m", "app"]
