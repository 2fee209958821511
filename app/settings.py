"""Gateway settings, read from ``GATEWAY_*`` environment variables.

Nothing is read at import time: ``get_settings()`` builds the object on first
use and caches it; tests build their own ``Settings(...)`` and pass it to
``create_app``.

An empty variable is the same as an unset one (its default): compose passes
every setting as ``${GATEWAY_NAME:-}``, so an operator's ``.env`` reaches the
gateway and an absent one leaves the default here, its only home. The prefix
is the gateway's alone: a ``GATEWAY_*`` variable that names no setting is a
mistake, reported at start-up with the closest name (``unknown_variables``).
"""

import difflib
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.request.identity import PRIORITIES

PREFIX = "GATEWAY_"
_MASK = "***"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=PREFIX, extra="ignore", env_ignore_empty=True)

    # Where the gateway listens and where the engine is.
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    # Several gateway processes on one host and port: each binds with
    # SO_REUSEPORT and the kernel spreads new connections over them
    # (docs/one-host.md; they share their budgets through ``redis_url``).
    reuse_port: bool = False
    # One engine, or several (comma-separated, or one ``dns+http://name:port``
    # re-resolved every ``upstream_dns_interval`` seconds: app/engine/discovery.py).
    upstream_url: str = "http://127.0.0.1:8001"
    upstream_urls: str | None = None
    upstream_dns_interval: float = Field(5.0, gt=0)
    # The engines' own key (vLLM's --api-key), sent as ``Authorization:
    # Bearer`` on every call to them. A client's Authorization never goes
    # upstream: it is the gateway's to check (``keys_file``).
    upstream_api_key: SecretStr | None = None
    # Routing among engines where a request fits: least loaded, or prefix
    # affinity with bounded load (no engine above ``routing_load_factor``
    # times its share of the fleet's requests). ``auto``: prefix routing
    # where the engines publish their KV cache events (``kv_events_endpoint``
    # set), least loaded where they do not (app/routing/setup.py says why).
    routing: Literal["auto", "least_loaded", "prefix"] = "auto"
    # The routing scorers' weights, ``name=weight`` comma-separated
    # (``prefix=1,in_flight=0.5``; the names: app/routing/scorers): unset,
    # the preset ``routing`` names. A weight of 0 takes a scorer out.
    routing_scorers: str | None = None
    routing_load_factor: float = Field(1.25, ge=1.0)
    # At low load, an engine may exceed its fair share by this many requests.
    routing_load_slack: int = Field(2, ge=0)
    # Prefix routing on KV cache events: the bound, times its fair share, up
    # to which the engine holding the most of a prompt keeps it where moving
    # it would miss and the prefix is not hot (its share of the requests
    # within what its holders carry: app/routing/heat.py). Never below
    # ``routing_load_factor``.
    routing_held_load_factor: float = Field(2.0, ge=1.0)
    # Prefix routing on KV cache events: how long a request may wait for the
    # engine that holds the most of its prompt while another has room,
    # seconds. It waits only while others take that room (an idle engine
    # it takes: ``routing_affinity_steal``): waiting for the holder beats
    # computing the prompt again elsewhere where the documents overflow one
    # engine's cache (docs/benchmarks.md). 0: it goes elsewhere at once.
    routing_affinity_wait: float = Field(10.0, ge=0)
    # What room such a waiting request takes elsewhere: only an ``idle``
    # engine's (nothing in flight there: its prompt evicts no running
    # request's cached prompt), or any room no one behind it took in a
    # dispatch round (``room``). ``idle`` evicts no running request's cached
    # prompt (docs/benchmarks.md compares them).
    routing_affinity_steal: Literal["room", "idle"] = "idle"
    # Prefix routing on KV cache events: where a prefix no engine holds is
    # computed — on the ``least_loaded`` engine, remembered as its home
    # (app/routing/homes.py), or where its ``key`` hashes (rendezvous: the
    # same on every replica, but documents fall where chance puts them).
    routing_placement: Literal["least_loaded", "key"] = "least_loaded"
    # Count a prompt prefix that requests admitted to one engine share once
    # (the engine's prefix cache stores it once).
    prefix_aware_demand: bool = True
    # The engines' KV cache events (vLLM's --kv-events-config, over ZeroMQ):
    # where each engine publishes them and its replay socket, as templates on
    # the engine URL's host and port — ``tcp://{host}:5557``, or
    # ``tcp://{host}:{port+100}`` for several engines on one host. Prefix
    # routing then ranks engines by how much of a prompt (given as token ids)
    # each holds (app/engine/kv_events.py). Unset: no events.
    kv_events_endpoint: str | None = None
    kv_events_replay_endpoint: str | None = None

    # Upstream HTTP client. The read timeout is an *idle* timeout: the longest
    # gap allowed between two chunks of a stream (or before response headers).
    upstream_connect_timeout: float = Field(5.0, gt=0)
    upstream_read_timeout: float = Field(120.0, gt=0)
    # A non-streaming call sends nothing until the whole answer is ready, so it
    # gets its own, longer limit.
    upstream_non_stream_timeout: float = Field(600.0, gt=0)
    upstream_max_connections: int = Field(1000, ge=1)

    # Engine health checks; also how often the engine's /metrics is read.
    health_interval: float = Field(1.0, gt=0)
    health_timeout: float = Field(2.0, gt=0)
    # How often an engine's model list is read again while it is up (LoRA
    # adapters come and go at run time); a name the gateway does not know
    # yet is looked up at once.
    models_interval: float = Field(5.0, gt=0)
    # Public names for served models: ``chat=llama-v2|llama-v1,default=tiny``
    # (the first name an engine serves; app/engine/aliases.py).
    model_aliases: str | None = None
    # Scale from zero (docs/scale-from-zero.md): the models a pool that may
    # have no engine up serves, ``name=context-length,...``
    # (app/engine/cold_models.py), so they list and validate while it has
    # none; and how long a request for one waits for an engine to come up,
    # counted from the later of its arrival and the pool's last change (0:
    # refused at once, as for any model no engine serves).
    cold_models: str | None = None
    cold_start_timeout: float = Field(0.0, ge=0)

    # Connections: at most ``max_connections`` open; a request head must
    # arrive within ``head_timeout`` seconds (app/serve/connections.py).
    max_connections: int = Field(4096, ge=1)
    head_timeout: float = Field(10.0, gt=0)
    # Requests whose body is being read or checked, before admission;
    # beyond it, 503 at once.
    max_receiving: int = Field(512, ge=1)

    # Request limits. The body must arrive within ``body_timeout`` seconds.
    max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    # An audio route's form, its file included (vLLM's own limit on an audio
    # file is 25 MB: VLLM_MAX_AUDIO_CLIP_FILESIZE_MB).
    max_upload_bytes: int = Field(25 * 1024 * 1024, ge=1024)
    body_timeout: float = Field(30.0, gt=0)
    max_n: int = Field(16, ge=1)
    # Most prompts in one batch (`prompt` as a list on /v1/completions).
    max_batch: int = Field(32, ge=1)

    # Retry-After (seconds) sent with 503 when the engine is down or the gateway drains.
    retry_after_unavailable: int = Field(5, ge=1)

    # SSE: keep-alive comment interval, and how long one send to a client may
    # block before the client is dropped as too slow.
    sse_ping_seconds: float = Field(15.0, ge=0)
    sse_send_timeout: float = Field(30.0, gt=0)
    # Server-Timing on every relayed answer's head (its queue wait, arrival to the
    # head), and the origins a browser lets read it (Timing-Allow-Origin).
    server_timing: bool = True
    timing_allow_origin: str | None = None
    # A stream that asks for its queue status (X-Queue-Status: on) is told
    # where it stands this often while it waits.
    queue_status_interval: float = Field(1.0, gt=0)

    # The Responses API: which engine holds which response, remembered for
    # at most this many responses, each for this many seconds
    # (app/request/response_ids.py).
    responses_remembered: int = Field(100_000, ge=0)
    responses_remember_seconds: float = Field(86_400.0, gt=0)

    # Graceful shutdown: in-flight work gets ``drain_grace_seconds`` to finish
    # after SIGTERM; the server's own shutdown timeout must be longer.
    drain_grace_seconds: float = Field(20.0, ge=0)
    shutdown_timeout: float = Field(30.0, gt=0)

    # The Batch API (``/v1/files``, ``/v1/batches``: docs/batches.md): where
    # files and the batches' state are kept (made on first use); an uploaded
    # file's most bytes and lines, and what one tenant's files may add up
    # to; lines in flight per gateway, all batches together; seconds after
    # which a batch expires (OpenAI's window is 24 h; tests shorten it).
    batch_dir: Path = Path("data/batches")
    batch_max_file_bytes: int = Field(200 * 1024 * 1024, ge=1)
    batch_max_lines: int = Field(50_000, ge=1)
    batch_tenant_bytes: int = Field(10 * 1024**3, ge=1)
    batch_concurrency: int = Field(8, ge=1)
    batch_completion_window: float = Field(24 * 3600.0, gt=0)

    # Admission control (``off`` keeps validation, metrics and auth).
    admission: Literal["on", "off"] = "on"
    # Sequences admitted at once, whatever the KV budget (set it to the
    # engine's --max-num-seqs or a little above).
    max_concurrency: int = Field(256, ge=1)
    # Where an engine's KV cache, not its sequence cap, bounds how many
    # requests it runs, start them one at a time, a sequence's life over
    # what the cache holds of them apart, each while the cache's future peak
    # fits: their peaks then spread instead of coming together
    # (app/admission/pace.py).
    paced_starts: bool = True
    # Most of the KV budget (and of max_concurrency) one request is charged,
    # so that no single request can hold admission up until the engine empties.
    max_request_share: float = Field(0.5, gt=0, le=1)
    queue_max_depth: int = Field(512, ge=0)
    # The queue's bodies, in bytes: a bound on what waiting requests hold.
    queue_max_bytes: int = Field(256 * 1024 * 1024, ge=1024)
    # The TTFT objective a request gets from its class when neither its key
    # nor its header (``x-slo-ttft-ms``) asks for a tighter one, seconds;
    # unset: ``queue_timeout`` (app/admission/classes.py).
    queue_timeout: float = Field(30.0, gt=0)
    ttft_objective_high: float | None = Field(None, gt=0)
    ttft_objective_normal: float | None = Field(None, gt=0)
    ttft_objective_low: float | None = Field(None, gt=0)
    # The classes whose running requests may be stopped (``evicted``) to make
    # room for a higher class that would miss its objective, comma-separated
    # ("" : none).
    sheddable_classes: str = "low"
    # Most running requests stopped for a higher class, per engine and
    # second (0: none are stopped).
    evictions_per_second: float = Field(32.0, ge=0)
    # Whether the engines order their own queue by priority (vLLM's
    # ``--scheduling-policy priority``): each request then carries its
    # class's priority to the engine, and a higher class is not held back
    # by what lower classes hold of the KV cache, which the engine preempts
    # first. ``fcfs``: the engines ignore priorities, the gateway's queue
    # alone keeps the order.
    engine_scheduling: Literal["fcfs", "priority"] = "fcfs"
    # The engine's KV cache, when it should not be read from its /metrics:
    # blocks, and their size in tokens (unset: the engine's own block size).
    kv_blocks: int | None = Field(None, ge=1)
    kv_block_size: int | None = Field(None, ge=1)
    # While the engine's KV capacity cannot be read (its /metrics lacks the
    # series), admission runs at most this many sequences at once.
    fallback_max_sequences: int = Field(8, ge=1)
    # Overcommit of the KV budget: where it starts and how far it may grow.
    overcommit_initial: float = Field(1.0, ge=0.5)
    overcommit_max: float = Field(4.0, ge=1.0)
    # What preemption may cost: the share of an engine's generated tokens it
    # may compute again after preemptions (recompute, estimated from its
    # preemptions and KV use: app/admission/recompute.py). The overcommit
    # grows while the engine stays within it and backs off past it; 0: no
    # preemption at all (for engines whose recompute is dear). Why not 0 by
    # default: docs/admission.md, what preemption may cost.
    preemption_budget: float = Field(0.3, ge=0)

    # How prompts are counted for reservations and key limits
    # (app/tokens): the engine's /tokenize, the model's tokenizer files in
    # ``tokenizer_dir`` (the model's directory, or one directory per served
    # model name), or the length estimate alone; ``auto``: the files when a
    # directory is given, else the engine. A count that takes longer than
    # ``prompt_count_timeout`` seconds falls back to the estimate.
    prompt_tokens: Literal["auto", "engine", "tokenizer", "estimate"] = "auto"
    tokenizer_dir: Path | None = None
    prompt_count_timeout: float = Field(2.0, gt=0)

    # API keys (app/keys): the YAML keys file, unset = no auth (tenants from
    # X-Tenant-Id); how often it is checked for changes; the length of the
    # window the keys' per-minute limits count in, in seconds.
    keys_file: Path | None = None
    keys_reload_interval: float = Field(2.0, gt=0)
    rate_limit_window: int = Field(60, ge=1)

    # Several gateway replicas share reservations, fair-share clocks and key
    # limits through Redis (app/state); unset = in this process only.
    # Reservations are held under a lease of ``redis_lease_seconds``, renewed
    # at a third of it: a replica that dies without a drain loses them then.
    redis_url: str | None = None
    # ``redis_url`` names one node of a Redis Cluster: the gateway finds the
    # others from it and runs each step of an admission on one slot's keys.
    redis_cluster: bool = False
    # Or a primary that Redis Sentinel watches and fails over to a replica:
    # the sentinels (``host:port``, comma-separated), the name they monitor
    # it under, the data nodes' password and the sentinels' own
    # (app/state/address.py). Set, it takes the place of ``redis_url`` (as
    # ``upstream_urls`` takes ``upstream_url``'s: compose sets a URL).
    redis_sentinels: str | None = None
    redis_sentinel_service: str = "mymaster"
    redis_password: SecretStr | None = None
    redis_sentinel_password: SecretStr | None = None
    redis_lease_seconds: float = Field(5.0, gt=0)
    redis_timeout: float = Field(0.5, gt=0)

    # When set, /metrics is served only on this port (health on both).
    admin_port: int | None = Field(None, ge=0, le=65535)

    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # Both logs, the application's (stderr) and the access log (stdout): one
    # JSON object a line (what log pipelines read; the access log always
    # was), or a line of text each (for reading in a terminal).
    log_format: Literal["json", "text"] = "json"

    # With keys on, the engine's prefix cache is kept apart per tenant (each
    # request salted by its tenant, unless its key shares the cache), or not
    # (``off``: the client's own cache_salt goes as sent). Without keys,
    # tenants are only claimed, so there is nothing to keep apart.
    prefix_cache_isolation: Literal["tenant", "off"] = "tenant"

    @model_validator(mode="after")
    def _tokenizer_dir_given(self) -> "Settings":
        if self.prompt_tokens == "tokenizer" and self.tokenizer_dir is None:
            raise ValueError("GATEWAY_PROMPT_TOKENS=tokenizer needs GATEWAY_TOKENIZER_DIR")
        return self

    @property
    def prompt_count_source(self) -> Literal["engine", "tokenizer", "estimate"]:
        """What ``prompt_tokens`` comes to (``auto`` resolved)."""
        if self.prompt_tokens == "auto":
            return "tokenizer" if self.tokenizer_dir is not None else "engine"
        return self.prompt_tokens

    @property
    def sheddable(self) -> frozenset[str]:
        """The classes ``sheddable_classes`` names."""
        return frozenset(n.strip() for n in self.sheddable_classes.split(",") if n.strip())

    @model_validator(mode="after")
    def _sheddable_are_classes(self) -> "Settings":
        unknown = sorted(self.sheddable - set(PRIORITIES))
        if unknown:
            raise ValueError(
                f"GATEWAY_SHEDDABLE_CLASSES: {', '.join(unknown)} is no class; "
                f"the classes: {', '.join(PRIORITIES)}"
            )
        return self

    @model_validator(mode="after")
    def _redis_given(self) -> "Settings":
        if self.redis_cluster and (self.redis_url is None or self.redis_sentinels is not None):
            raise ValueError(
                "GATEWAY_REDIS_CLUSTER needs GATEWAY_REDIS_URL (one of the cluster's nodes) "
                "and no GATEWAY_REDIS_SENTINELS"
            )
        if self.redis_sentinels is not None:
            sentinel_nodes(self.redis_sentinels)
        elif self.redis_password is not None or self.redis_sentinel_password is not None:
            raise ValueError(
                "GATEWAY_REDIS_PASSWORD and GATEWAY_REDIS_SENTINEL_PASSWORD go with "
                "GATEWAY_REDIS_SENTINELS (a GATEWAY_REDIS_URL carries its own password)"
            )
        return self

    @model_validator(mode="after")
    def _cold_start_held_in_the_queue(self) -> "Settings":
        if self.cold_start_timeout > 0 and self.admission == "off":
            raise ValueError(
                "GATEWAY_COLD_START_TIMEOUT holds requests in admission's queue: it needs"
                " GATEWAY_ADMISSION=on"
            )
        if self.cold_start_timeout > 0 and not self.cold_models:
            raise ValueError(
                "GATEWAY_COLD_START_TIMEOUT holds requests for the models GATEWAY_COLD_MODELS"
                " names: name them"
            )
        return self

    @model_validator(mode="after")
    def _grace_fits_in_shutdown(self) -> "Settings":
        if self.drain_grace_seconds >= self.shutdown_timeout:
            raise ValueError(
                "GATEWAY_DRAIN_GRACE_SECONDS must be shorter than GATEWAY_SHUTDOWN_TIMEOUT"
            )
        return self


def sentinel_nodes(text: str) -> tuple[tuple[str, int], ...]:
    """``host:port,host:port`` (``[v6]:port`` for an IPv6 address) as
    pairs; ``ValueError`` naming the entry that is not one."""
    nodes = []
    for entry in (part.strip() for part in text.split(",")):
        try:
            parts = urlsplit(f"//{entry}")
            node = (parts.hostname, parts.port)
            plain = not parts.path and parts.username is None
        except ValueError:  # a port out of range or not a number
            node, plain = (None, None), False
        host, port = node
        if not (host and port is not None and plain):
            raise ValueError(f"GATEWAY_REDIS_SENTINELS: {entry!r} is not a sentinel's host:port")
        nodes.append((host, port))
    return tuple(nodes)


@lru_cache
def default(name: str) -> Any:
    """A setting's default. Each default has its home here; admission's
    configurations (``BudgetConfig``, ``PolicyConfig``) read theirs."""
    return Settings.model_fields[name].default


def get_settings() -> Settings:
    return Settings()


def variable(name: str) -> str:
    """The environment variable of a setting: ``queue_timeout`` → ``GATEWAY_QUEUE_TIMEOUT``."""
    return PREFIX + name.upper()


def unknown_variables(environ: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """``GATEWAY_*`` variables that name no setting, each with the closest
    setting's variable (None when none is close), in name order. Names are
    compared without the prefix, which every one shares."""
    known = [name.upper() for name in Settings.model_fields]
    found = []
    # Read as pydantic-settings reads them: whatever the case.
    for name in sorted(environ):
        upper = name.upper()
        if upper.startswith(PREFIX) and upper.removeprefix(PREFIX) not in known:
            close = difflib.get_close_matches(upper.removeprefix(PREFIX), known, n=1)
            found.append((name, PREFIX + close[0] if close else None))
    return found


def effective_settings(settings: Settings) -> list[tuple[str, str]]:
    """Every setting by its variable, as an env file would carry it (unset = empty),
    with the upstream key and the Redis URL's password masked."""
    return [
        (variable(name), _shown(name, getattr(settings, name))) for name in Settings.model_fields
    ]


def _shown(name: str, value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, SecretStr):
        return _MASK
    if isinstance(value, bool):
        return str(value).lower()
    if name == "redis_url" and isinstance(value, str):
        return masked_url(value)
    return str(value)


def masked_url(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{user}:{_MASK}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))
