"""A burst's first batch — the streams the engine runs first — and where the
engine's cores went while it streamed, and once settled.

Through every relay the first batch ends later than direct, and its
successors (the burst's other half) start that much later: TTFT p99 from
t=0. This says whether the engine's core got less of its cores then (its
API server or another process took them) or needed more of them for the
same batch."""

from typing import Any

from benchmarks.harness import Call, table
from benchmarks.overhead.engine_cpu import stretch
from benchmarks.overhead.spread import spread, spread_text
from benchmarks.overhead.targets import NAMES


def first_batch(served: list[Call], t0: float, cap: int) -> dict[str, float] | None:
    """When the burst's first batch — the ``cap`` streams that got a first
    token first — got its first tokens (median, last) and ended (median),
    in seconds from t=0: a relay that starts it later loses that much of
    the window's tokens however full it keeps the engine after. And the
    tokens its events carried: vLLM merges a stream's tokens into one event
    when the stream's reader falls behind, and each event it sends costs its
    API server, which shares the engine's cores."""
    batch = sorted(
        (c for c in served if c.first_token is not None), key=lambda c: c.first_token or 0.0
    )[:cap]
    if len(batch) < cap:
        return None
    tokens = [(c.first_token or 0.0) - t0 for c in batch]
    ends = sorted(c.finished - t0 for c in batch)
    return {
        "first_token_p50": round(tokens[len(tokens) // 2], 3),
        "first_token_max": round(tokens[-1], 3),
        "end_p50": round(ends[len(ends) // 2], 3),
        "tokens_per_event": tokens_per_event(batch),
    }


def tokens_per_event(streams: list[Call]) -> float:
    """The completion tokens the streams' content events carried, on average
    (0 where they had none)."""
    events = sum(c.events for c in streams)
    return round(sum(c.completion_tokens for c in streams) / events, 3) if events else 0.0


def core_ms_per_100_tokens(r: dict[str, Any], key: str = "core_s") -> float | None:
    """Settled, the engine core's CPU milliseconds per 100 tokens the engine
    generated: what a step costs it for the same work, whatever share of its
    cores it got (``key`` "workers_s": its model workers' part)."""
    cpu, rate = r.get("engine_cpu_settled"), r.get("engine_tokens_per_s")
    if not cpu or not rate or not cpu["wall_s"]:
        return None
    generated = float(rate) * float(cpu["wall_s"])
    if key not in cpu:
        return None
    return float(cpu[key]) / generated * 100_000


# The stretch before the first batch's end, where the next batch's intake
# meets the batch's last steps on the engine's cores.
END_STRETCH_S = 1.5


def before_its_end(r: dict[str, Any]) -> dict[str, float] | None:
    """The engine's cores in the last ``END_STRETCH_S`` before the first
    batch's median end, from the kept readings (None: none kept)."""
    batch, rows = r.get("first_batch"), r.get("engine_cpu_readings")
    if not batch or not rows:
        return None
    end = float(batch["end_p50"])
    return stretch(rows, end - END_STRETCH_S, end)


def first_batch_table(results: list[dict[str, Any]]) -> str:
    """Per target, over the rounds: the first batch's first tokens and end,
    the tokens its events carried, the engine's cores until its median end
    (the API server's CPU seconds, the engine core's, the others'; how often
    the engine core was preempted), the API server's and the engine core's
    shares of the cores in its last seconds (where the next batch's intake
    meets it), and settled, the API server's share of the cores and the engine
    core's CPU per 100 tokens."""
    headers = [
        "target",
        "first tokens p50 / last s",
        "end p50 s",
        "tokens per event",
        "to its end: API server / engine core / others, CPU-s",
        "engine core preempted",
        f"its last {END_STRETCH_S:g} s: API server's / engine core's share",
        "settled: API server's share",
        "settled: engine core ms per 100 tokens, of which its workers'",
    ]
    cells: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        cells.setdefault(r["target"], []).append(r)
    body = []
    for target, rounds in cells.items():
        batches = [b for r in rounds if (b := r.get("first_batch"))]
        cpus = [c for r in rounds if (c := r.get("engine_cpu_first_batch"))]
        settled = [c for r in rounds if (c := r.get("engine_cpu_settled")) and c["wall_s"]]
        per_100 = [v for r in rounds if (v := core_ms_per_100_tokens(r)) is not None]
        workers_100 = [v for r in rounds if (v := core_ms_per_100_tokens(r, "workers_s"))]
        ends = [c for r in rounds if (c := before_its_end(r))]

        def of(items: list[dict[str, Any]], key: str, digits: int = 2) -> str:
            return spread_text(spread([i[key] for i in items]), digits)

        def share(items: list[dict[str, Any]], key: str) -> str:
            return spread_text(spread([i[key] / i["wall_s"] for i in items if i["wall_s"]]), 3)

        body.append(
            [
                NAMES[target],
                f"{of(batches, 'first_token_p50')} / {of(batches, 'first_token_max')}",
                of(batches, "end_p50"),
                of(batches, "tokens_per_event"),
                " / ".join(of(cpus, key) for key in ("api_s", "core_s", "others_s")),
                of(cpus, "core_preempted", 0),
                " / ".join(share(ends, key) for key in ("api_s", "core_s")) if ends else "-",
                spread_text(spread([c["api_s"] / c["wall_s"] for c in settled]), 2),
                spread_text(spread(per_100), 2)
                + (f", {spread_text(spread(workers_100), 2)}" if workers_100 else ""),
            ]
        )
    return table(headers, body)
