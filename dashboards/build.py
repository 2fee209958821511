"""Generate the Grafana dashboards from code, with Grafana's own types.

    .venv/bin/python -m dashboards.build      # rewrites dashboards/*.json

Three dashboards share one datasource variable and one model variable:

- **vLLM gateway**: what the gateway does — outcomes, queue, refusals,
  cancellations, latency as the client sees it, the KV budget; the fleet
  (each engine's health, routing, reservations; prefix affinity; the state
  replicas share through Redis); and each keyed tenant's tokens and refusals
  (a tenant variable over the tenants of the keys file);
- **vLLM engine**: what vLLM does — running and waiting, KV cache, preemptions,
  tokens, its own latencies, finish reasons;
- **Degradation**: the two-stage story on one screen — offered load against
  throughput, latency, KV usage, preemptions and the gateway's queue, so the
  graceful range and the knee are visible.

Quantiles come from the recording rules in ``deploy/prometheus/rules`` (one
evaluation per interval, not one per panel refresh); rates use
``$__rate_interval``. The tests check that the JSON files match this code and
run every panel's query against a real Prometheus.
"""

import json
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard, prometheus, stat, text, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableRefresh

HERE = Path(__file__).resolve().parent
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
MODEL = 'model_name=~"$model"'
TENANT = 'tenant=~"$tenant"'
RATE = "$__rate_interval"

REJECTION_REASONS = (
    "Refused before the engine saw them. The client's input: `invalid`, `too_large`,"
    " `body_timeout` (body not received in time), `engine_invalid` (the engine's own 4xx),"
    " `slow_reader` (a stream's client stopped reading). Its key: `unauthorized` (missing or"
    " unknown key), `forbidden` (a priority the key may not use), `rate_limited` (the key's"
    " limits). Capacity: `queue_full` (the queue at its depth or bytes), `objective_forecast`"
    " (a predicted wait that leaves no time for its first token within its objective),"
    " `objective_expired` (its objective passed while it waited), `evicted` (a sheddable"
    " request stopped for a higher class), `unavailable`"
    " (no engine up), `overloaded` (too many requests being received), `draining`."
)

Query = tuple[str, str]  # (PromQL, legend)


def _targets(panel: timeseries.Panel | stat.Panel, queries: list[Query]) -> None:
    for index, (expr, legend) in enumerate(queries):
        panel.with_target(
            prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(chr(ord("A") + index))
        )


def graph(
    title: str,
    queries: list[Query],
    unit: str = "short",
    description: str = "",
    span: int = 12,
    traced: str | None = None,
) -> timeseries.Panel:
    """A time series panel. ``traced``: a histogram of the gateway's whose
    exemplars (the trace ids of traced requests) the panel shows, through
    one more query on its buckets (a recording rule's series have none)."""
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(span)
        .height(8)
        .fill_opacity(10)
    )
    _targets(panel, queries)
    if traced is not None:
        panel.with_target(
            prometheus.Dataquery()
            .expr(f"histogram_quantile(0.99, sum by (le) (rate({traced}_bucket[{RATE}])))")
            .legend_format("p99, dots: traced requests")
            .exemplar(True)
            .ref_id(chr(ord("A") + len(queries)))
        )
    return panel


def single(title: str, query: Query, unit: str = "short", description: str = "") -> stat.Panel:
    panel = (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(6)
        .height(4)
    )
    _targets(panel, [query])
    return panel


def _base(title: str, uid: str, description: str) -> dashboard.Dashboard:
    return (
        dashboard.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["vllm", "vllm-gateway"])
        .refresh("10s")
        .time("now-30m", "now")
        .with_variable(
            dashboard.DatasourceVariable("datasource").label("Datasource").type("prometheus")
        )
        .with_variable(
            dashboard.QueryVariable("model")
            .label("Model")
            .datasource(DATASOURCE)
            .query("label_values(vllm:num_requests_running, model_name)")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .include_all(True)
            .all_value(".*")
        )
    )


def _tenant_variable() -> dashboard.QueryVariable:
    """The tenants named in the keys file (no series exist for any other)."""
    return (
        dashboard.QueryVariable("tenant")
        .label("Tenant")
        .datasource(DATASOURCE)
        .query("label_values(gateway_tenant_tokens_total, tenant)")
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )


def gateway_dashboard() -> dashboard.Dashboard:
    return (
        _base(
            "vLLM gateway",
            "vllm-gateway",
            "The gateway in front of vLLM: traffic, refusals, latency, KV budget, the fleet of engines and replicas, tenants.",
        )
        .with_variable(_tenant_variable())
        .with_row(dashboard.Row("Traffic"))
        .with_panel(
            graph(
                "Requests by outcome",
                [(f"sum by (outcome) (rate(gateway_requests_total[{RATE}]))", "{{outcome}}")],
                "reqps",
                "Every request that reaches a route ends in one outcome.",
            )
        )
        .with_panel(
            graph(
                "Receiving, queued and in flight",
                [
                    ("sum(gateway_requests_in_flight)", "in flight"),
                    ("sum by (priority) (gateway_queue_depth)", "queued {{priority}}"),
                    ("sum(gateway_requests_receiving)", "receiving (body, before admission)"),
                ],
                description="A queue that never empties means the engines are at capacity. Receiving: requests whose body is still being read or checked.",
            )
        )
        .with_panel(
            graph(
                "Rejections by reason",
                [(f"sum by (reason) (rate(gateway_rejections_total[{RATE}]))", "{{reason}}")],
                "reqps",
                REJECTION_REASONS,
            )
        )
        .with_panel(
            graph(
                "Cancellations by phase",
                [(f"sum by (phase) (rate(gateway_cancellations_total[{RATE}]))", "{{phase}}")],
                "reqps",
                "Clients that left — while their body arrived (`receiving`), `queued`, before the first token, mid-stream, or during a non-streaming call; the engine's work for them was stopped.",
            )
        )
        .with_row(dashboard.Row("Latency as clients see it"))
        .with_panel(
            graph(
                "Time to first token",
                [("job:gateway_time_to_first_token_seconds:quantile_1m", "p{{quantile}} {{job}}")],
                "s",
                "Arrival at the gateway to first token sent: queue wait included. With"
                " traces on, the dots are traced requests: each links to its trace.",
                span=6,
                traced="gateway_time_to_first_token_seconds",
            )
        )
        .with_panel(
            graph(
                "Inter-token latency",
                [("job:gateway_inter_token_latency_seconds:quantile_1m", "p{{quantile}} {{job}}")],
                "s",
                span=6,
            )
        )
        .with_panel(
            graph(
                "Queue wait",
                [("job:gateway_queue_wait_seconds:quantile_1m", "p{{quantile}} {{job}}")],
                "s",
                span=6,
            )
        )
        .with_panel(
            graph(
                "Request duration",
                [("job:gateway_request_duration_seconds:quantile_1m", "p{{quantile}} {{job}}")],
                "s",
                "With traces on, the dots are traced requests: each links to its trace.",
                span=6,
                traced="gateway_request_duration_seconds",
            )
        )
        .with_panel(
            graph(
                "What the gateway adds",
                [
                    (
                        f"histogram_quantile(0.99, sum by (job, le) (rate(gateway_first_event_added_seconds_bucket[{RATE}])))",
                        "first event, engine read to client send, p99 {{job}}",
                    ),
                    (
                        "max by (job) (gateway_event_loop_lag_seconds)",
                        "event loop lag (max 30 s) {{job}}",
                    ),
                    (
                        f"histogram_quantile(0.5, sum by (job, le) (rate(gateway_added_latency_seconds_bucket[{RATE}])))",
                        "in front of the engine, p50 {{job}}",
                    ),
                    (
                        f"histogram_quantile(0.99, sum by (job, le) (rate(gateway_added_latency_seconds_bucket[{RATE}])))",
                        "in front of the engine, p99 {{job}}",
                    ),
                ],
                "s",
                "The relay's own time before a stream's first event reaches the client's connection, and how late the gateway's event loop runs: lag high while the first event's time stays low means requests wait for the process (a shared or busy core, too much for one process) before the gateway reads their bytes. In front of the engine: a request's time to first token (whole answers: to the end) less its wait in the gateway's queue and less what the engine says it took (engines run with --enable-per-request-metrics): the gateway, the engine's HTTP server and the network between.",
                span=12,
            )
        )
        .with_row(dashboard.Row("Capacity"))
        .with_panel(
            graph(
                "KV tokens: reserved, budget, capacity",
                [
                    ("sum(gateway_kv_tokens_reserved)", "reserved"),
                    (
                        "sum(max by (engine) (gateway_kv_tokens_budget))",
                        "budget (capacity x overcommit)",
                    ),
                    ("sum(max by (engine) (gateway_kv_tokens_capacity))", "engine capacity"),
                ],
                description="Over all engines. Reserved: what every replica holds, summed. Budget and capacity: each engine's once (every replica reports them; with Redis down a replica's budget is its share). Admission keeps reserved under the budget; the budget shrinks when an engine preempts.",
            )
        )
        .with_panel(
            graph(
                "Tokens through the gateway",
                [(f"sum by (kind) (rate(gateway_tokens_total[{RATE}]))", "{{kind}}")],
                "short",
                "Prompt and completion tokens of completed and cancelled requests, per second.",
            )
        )
        .with_panel(
            single(
                "Engines up",
                ("sum(max by (engine) (gateway_upstream_up))", "up"),
                description="Engines in routing on at least one replica.",
            )
        )
        .with_panel(single("Draining", ("max(gateway_draining)", "draining")))
        .with_panel(
            single(
                "Shared state up",
                ("min(gateway_shared_state_up)", "up"),
                description="1 while every replica reaches Redis; 0: some replica admits on its"
                " share. No data: no replica shares state (no GATEWAY_REDIS_URL), nothing to be down.",
            )
        )
        .with_panel(
            single(
                "Keys file reload failures",
                ("sum(gateway_keys_reload_failures_total)", "failures"),
                description="Since each replica started. A failed reload keeps the previous keys.",
            )
        )
        .with_row(dashboard.Row("Fleet"))
        .with_panel(
            graph(
                "Engine health",
                [
                    ("min by (engine) (gateway_upstream_up)", "up {{engine}}"),
                    ("max by (engine) (gateway_engine_stats_missing)", "series missing {{engine}}"),
                ],
                description="Up: 1 in routing on every replica, 0 ejected by at least one (failed health checks or refused connections). Series missing: what admission reads that the engine's /metrics lacks (admission falls back to its conservative limits).",
            )
        )
        .with_panel(
            graph(
                "Requests routed per engine",
                [
                    (
                        f"sum by (engine) (rate(gateway_engine_requests_total[{RATE}]))",
                        "{{engine}}",
                    )
                ],
                "reqps",
                "Admissions to each engine, over all replicas.",
            )
        )
        .with_panel(
            graph(
                "In flight per engine",
                [
                    ("sum by (engine) (gateway_engine_requests_in_flight)", "{{engine}}"),
                    ("max by (engine) (gateway_engine_sequence_cap)", "sequence cap {{engine}}"),
                ],
                description="Requests upstream on each engine, over all replicas; the cap is the most sequences admission runs there (the engine's --max-num-seqs once learned).",
            )
        )
        .with_panel(
            graph(
                "KV reserved per engine, of its budget",
                [
                    (
                        "sum by (engine) (gateway_kv_tokens_reserved) / max by (engine) (gateway_kv_tokens_budget)",
                        "{{engine}}",
                    ),
                    (
                        "max by (engine) (gateway_fleet_kv_tokens_reserved) / max by (engine) (gateway_kv_tokens_budget)",
                        "{{engine}} (shared state)",
                    ),
                ],
                "percentunit",
                "What least-loaded routing compares. The first line sums what each replica holds; the second is the fleet's holding read from Redis (replicas sharing state only).",
            )
        )
        .with_panel(
            graph(
                "Ejections and retries",
                [
                    (
                        f"sum by (engine) (increase(gateway_engine_ejections_total[{RATE}]))",
                        "ejected {{engine}}",
                    ),
                    (
                        f"sum by (engine) (increase(gateway_engine_retries_total[{RATE}]))",
                        "retried away from {{engine}}",
                    ),
                ],
                description="Ejections: the engine taken out of routing. Retries: requests the engine failed before any byte reached the client, sent once to another engine.",
            )
        )
        .with_panel(
            graph(
                "Prefix affinity",
                [
                    (
                        f"sum by (engine) (rate(gateway_routing_affinity_hits_total[{RATE}]))",
                        "to its preferred engine {{engine}}",
                    ),
                    (
                        f"sum by (engine) (rate(gateway_routing_load_cap_overrides_total[{RATE}]))",
                        "passed over for load {{engine}}",
                    ),
                ],
                "reqps",
                "Prefix routing: requests sent to the engine their prompt prefix prefers, and requests sent elsewhere because that engine was loaded past the cap (labelled with the engine passed over). Whether the engine's cache then hits: vLLM engine → Prefix cache hit rate.",
            )
        )
        .with_panel(
            graph(
                "Shared state per replica",
                [("max by (instance) (gateway_shared_state_up)", "{{instance}}")],
                description="1: the replica decides with what every replica holds (Redis answers). 0: it admits on its share of each engine and of each key's limits.",
                span=24,
            )
        )
        .with_row(dashboard.Row("Models and adapters"))
        .with_panel(
            graph(
                "Requests per model",
                [
                    (
                        f"sum by (model, outcome) (rate(gateway_model_requests_total[{RATE}]))",
                        "{{model}} {{outcome}}",
                    )
                ],
                "reqps",
                "By the served model or LoRA adapter a request went to (an alias's requests under the name it resolved to). Only names the engines serve have series; an adapter no engine lists any more loses them.",
            )
        )
        .with_panel(
            graph(
                "Tokens per model",
                [
                    (
                        f"sum by (model, kind) (rate(gateway_model_tokens_total[{RATE}]))",
                        "{{model}} {{kind}}",
                    )
                ],
                "short",
                "Prompt and completion tokens of completed and cancelled requests, per served model or adapter. Which engine runs which adapter: vLLM engine → its lora_requests_info.",
            )
        )
        .with_row(dashboard.Row("Tenants"))
        .with_panel(
            graph(
                "Tokens per tenant",
                [
                    (
                        f"sum by (tenant, kind) (rate(gateway_tenant_tokens_total{{{TENANT}}}[{RATE}]))",
                        "{{tenant}} {{kind}}",
                    )
                ],
                "short",
                "Tenants of the keys file. Admitted: what a request is charged against the key's token limit when it is admitted (between its estimate and its worst case); used: what the engine reported (prompt + completion), what the limit settles to.",
            )
        )
        .with_panel(
            graph(
                "Refusals per tenant",
                [
                    (
                        f"sum by (tenant, reason) (rate(gateway_tenant_rejections_total{{{TENANT}}}[{RATE}]))",
                        "{{tenant}} {{reason}}",
                    )
                ],
                "reqps",
                "Requests refused for a keyed tenant: `rate_limited` (its key's limits), `forbidden` (a priority the key may not use), and any other reason. Requests without a valid key have no tenant: see `unauthorized` under Rejections by reason.",
            )
        )
    )


def engine_dashboard() -> dashboard.Dashboard:
    return (
        _base("vLLM engine", "vllm-engine", "vLLM's own metrics, scraped from the engine.")
        .with_row(dashboard.Row("Scheduler and memory"))
        .with_panel(
            graph(
                "Running and waiting requests",
                [
                    (f"sum(vllm:num_requests_running{{{MODEL}}})", "running"),
                    (f"sum(vllm:num_requests_waiting{{{MODEL}}})", "waiting (incl. preempted)"),
                ],
            )
        )
        .with_panel(
            graph(
                "KV cache usage",
                [(f"max by (instance) (vllm:kv_cache_usage_perc{{{MODEL}}})", "{{instance}}")],
                "percentunit",
                "Per engine.",
            )
        )
        .with_panel(
            graph(
                "Preemptions",
                [
                    (
                        f"sum by (instance) (rate(vllm:num_preemptions_total{{{MODEL}}}[{RATE}]))",
                        "{{instance}}",
                    )
                ],
                "short",
                "Running requests whose KV cache was freed to be recomputed later, per second and engine: past the knee.",
            )
        )
        .with_panel(
            graph(
                "Tokens",
                [
                    (f"sum(rate(vllm:prompt_tokens_total{{{MODEL}}}[{RATE}]))", "prompt/s"),
                    (f"sum(rate(vllm:generation_tokens_total{{{MODEL}}}[{RATE}]))", "generated/s"),
                ],
            )
        )
        .with_row(dashboard.Row("Engine latency"))
        .with_panel(
            graph(
                "Time to first token (engine)",
                [
                    (
                        f"model_name:vllm_time_to_first_token_seconds:quantile_1m{{{MODEL}}}",
                        "p{{quantile}}",
                    )
                ],
                "s",
                span=8,
            )
        )
        .with_panel(
            graph(
                "Inter-token latency (engine)",
                [
                    (
                        f"model_name:vllm_inter_token_latency_seconds:quantile_1m{{{MODEL}}}",
                        "p{{quantile}}",
                    )
                ],
                "s",
                span=8,
            )
        )
        .with_panel(
            graph(
                "Time in the engine's queue",
                [
                    (
                        f"model_name:vllm_request_queue_time_seconds:quantile_1m{{{MODEL}}}",
                        "p{{quantile}}",
                    )
                ],
                "s",
                span=8,
            )
        )
        .with_row(dashboard.Row("Outcomes and cache"))
        .with_panel(
            graph(
                "Finish reasons",
                [
                    (
                        f"sum by (finished_reason) (rate(vllm:request_success_total{{{MODEL}}}[{RATE}]))",
                        "{{finished_reason}}",
                    )
                ],
                "reqps",
                "Aborted requests are not counted by vLLM: see the gateway's cancellations.",
            )
        )
        .with_panel(
            graph(
                "Prefix cache hit rate",
                [
                    (
                        f"sum by (instance) (rate(vllm:prefix_cache_hits_total{{{MODEL}}}[{RATE}]))"
                        f" / sum by (instance) (rate(vllm:prefix_cache_queries_total{{{MODEL}}}[{RATE}]))",
                        "{{instance}}",
                    ),
                    (
                        f"sum(rate(vllm:prefix_cache_hits_total{{{MODEL}}}[{RATE}]))"
                        f" / sum(rate(vllm:prefix_cache_queries_total{{{MODEL}}}[{RATE}]))",
                        "all engines",
                    ),
                ],
                "percentunit",
                "Prompt tokens served from the engine's prefix cache, of those looked up. Prefix routing sends prompts that share a prefix to one engine so this rises: vLLM gateway → Prefix affinity.",
            )
        )
        .with_panel(
            single(
                "KV cache blocks",
                (
                    f"max by (num_gpu_blocks, block_size) (vllm:cache_config_info{{{MODEL}}})",
                    "{{num_gpu_blocks}} x {{block_size}}",
                ),
                description="num_gpu_blocks x block_size tokens.",
            )
        )
    )


DIAGNOSIS = """\
**Reading it.** Raise the offered load and watch two stages:

1. *Graceful*: throughput rises, then flattens; latency rises; no preemptions.
2. *Knee*: KV cache usage reaches 100%, preemptions start, the engine's waiting
   queue stays non-empty, latency jumps for everyone.

With admission on, the excess shows as the gateway's queue and 429s instead.
Full memory + little useful work = a memory problem; empty memory + little
useful work = a scheduling problem; a persistently non-empty waiting queue =
at capacity, whatever utilisation says.
"""


def degradation_dashboard() -> dashboard.Dashboard:
    return (
        _base("Degradation", "vllm-degradation", "Graceful, then preemption: where is the knee?")
        .with_panel(
            graph(
                "Offered load and throughput",
                [
                    (
                        "sum(gateway_requests_in_flight) + sum(gateway_queue_depth)",
                        "at the gateway (in flight + queued)",
                    ),
                    (
                        f"sum(vllm:num_requests_running{{{MODEL}}}) + sum(vllm:num_requests_waiting{{{MODEL}}})",
                        "at the engine (running + waiting)",
                    ),
                    (
                        f"sum(rate(vllm:generation_tokens_total{{{MODEL}}}[{RATE}])) / 100",
                        "generated tokens/s ÷ 100",
                    ),
                ],
                description="Concurrency against useful work: throughput flattens at saturation.",
                span=16,
            )
        )
        .with_panel(text.Panel().title("How to read this").content(DIAGNOSIS).span(8).height(8))
        .with_panel(
            graph(
                "Time to first token, p99",
                [
                    (
                        'job:gateway_time_to_first_token_seconds:quantile_1m{quantile="0.99"}',
                        "gateway (with queue)",
                    ),
                    (
                        f'model_name:vllm_time_to_first_token_seconds:quantile_1m{{quantile="0.99", {MODEL}}}',
                        "engine",
                    ),
                ],
                "s",
                span=8,
            )
        )
        .with_panel(
            graph(
                "KV cache usage",
                [(f"max(vllm:kv_cache_usage_perc{{{MODEL}}})", "used")],
                "percentunit",
                span=8,
            )
        )
        .with_panel(
            graph(
                "Preemptions",
                [(f"sum(rate(vllm:num_preemptions_total{{{MODEL}}}[{RATE}]))", "preemptions/s")],
                span=8,
            )
        )
        .with_panel(
            graph(
                "Queues",
                [
                    ("sum(gateway_queue_depth)", "gateway queue"),
                    (f"sum(vllm:num_requests_waiting{{{MODEL}}})", "engine waiting"),
                ],
                span=12,
            )
        )
        .with_panel(
            graph(
                "Capacity refusals",
                [
                    (
                        f'sum by (reason) (rate(gateway_rejections_total{{reason=~"queue_full|objective_forecast|objective_expired|evicted"}}[{RATE}]))',
                        "{{reason}}",
                    )
                ],
                "reqps",
                span=12,
            )
        )
    )


DASHBOARDS = {
    "gateway.json": gateway_dashboard,
    "engine.json": engine_dashboard,
    "degradation.json": degradation_dashboard,
}


def render(build: dashboard.Dashboard) -> str:
    model = json.loads(JSONEncoder().encode(build.build()))
    # Stable panel ids (Grafana links and alerts refer to them).
    for number, panel in enumerate(model["panels"], start=1):
        panel["id"] = number
    return json.dumps(model, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> None:
    for name, make in DASHBOARDS.items():
        (HERE / name).write_text(render(make()), encoding="utf-8")
        print(f"wrote dashboards/{name}")


if __name__ == "__main__":
    main()
