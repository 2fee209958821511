"""The overhead benchmark's summary: its layout and, beside the tables
(medians of the rounds), each round's cells, so a page can quote one round
or count the rounds a gateway read above direct in."""

from collections.abc import Callable
from typing import Any

from benchmarks.overhead.targets import NAMES
from benchmarks.summary.page import fixed, table

Record = dict[str, Any]


def layout(result: Record) -> str:
    """Each layout the run measured, as it recorded the engine's cores."""
    described = []
    for name, data in (result.get("layouts") or {"pinned": result}).items():
        cpus = data.get("engine_cpus", "?")
        if name == "pinned":
            described.append(
                f"pinned: the engine on CPU {cpus}, the client and every relay on the cores"
                " it leaves (as `make up` lays it out)"
            )
        else:
            described.append(f"unpinned: the engine, the relays and the client share CPUs {cpus}")
    return "; ".join(described)


def per_round(result: Record) -> list[tuple[str, str]]:
    sections = []
    for name, data in (result.get("layouts") or {"pinned": result}).items():
        if data.get("runs"):
            sections.append((f"Rows, each round ({name})", rows_rounds(data["runs"])))
        if data.get("overload"):
            sections.append((f"Overload, each round ({name})", overload_rounds(data["overload"])))
    return sections


def _name(target: str) -> str:
    return NAMES.get(target, target)


def _per_1k(run: Record, key: str) -> float | None:
    cpu, tokens = run.get(key), run.get("tokens_in_window") or 0
    return None if cpu is None or tokens <= 0 else 1000 * cpu / tokens


def rows_rounds(runs: list[Record]) -> str:
    """One line per row, target and round; the ratio to the direct run of
    the same row and round, as the rows table pairs them."""
    direct = {(r["row"], r["repeat"]): r for r in runs if r["target"] == "direct"}
    body = []
    for r in sorted(runs, key=lambda r: (_row_order(r["row"]), r["target"], r["repeat"])):
        base = direct.get((r["row"], r["repeat"]))
        ratio = (
            r["tokens_per_s"] / base["tokens_per_s"]
            if base and base["tokens_per_s"] and r["target"] != "direct"
            else None
        )
        body.append(
            [
                r["row"],
                _name(r["target"]),
                r["repeat"] + 1,
                fixed(r["tokens_per_s"], 0),
                fixed(ratio),
                fixed(r.get("ttft_p50"), 1, 1000),
                fixed(r.get("ttft_p99"), 1, 1000),
                fixed(r.get("itl_p50"), 2, 1000),
                fixed(r.get("itl_p99"), 2, 1000),
                fixed(_per_1k(r, "proxy_cpu_s"), 3),
                fixed(_per_1k(r, "engine_api_cpu_s"), 3),
                fixed(r.get("preemptions"), 0),
                r.get("errors", "-"),
            ]
        )
    headers = ["users", "target", "round", "tok/s", "× direct (same round)"]
    headers += ["TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms"]
    headers += ["relay CPU-s/1k tok", "vLLM API server CPU-s/1k tok", "preempt", "errors"]
    return table(headers, body)


def _row_order(row: str) -> tuple[int, str]:
    return (int(row), "") if row.isdigit() else (10**6, row)


def _throughput(r: Record) -> float | None:
    """Tokens per second from t=0 (older results counted from the settled window only)."""
    value = r.get("tokens_per_s_all", r.get("tokens_per_s"))
    return None if value is None else float(value)


def _p99_from_t0(r: Record) -> float | None:
    value = r.get("ttft_p99_all", r.get("ttft_p99"))
    return None if value is None else float(value)


def _difference(value: float | None, base: float | None) -> str:
    return "-" if value is None or base is None else f"{value - base:+.2f}"


def _ratio(value: float | None, base: float | None) -> str:
    return "-" if value is None or not base else f"{value / base:.2f}"


def overload_rounds(results: list[Record]) -> str:
    """One line per client, target and round, each paired with vLLM direct
    in the same round and client; columns no round recorded are left out."""
    direct = {
        (r.get("client", "honour"), r["repeat"]): r for r in results if r["target"] == "direct"
    }
    order = list(dict.fromkeys(r["target"] for r in results))
    columns: list[tuple[str, Callable[[Record, Record | None], str]]] = [
        ("tok/s from t=0", lambda r, d: fixed(_throughput(r), 0)),
        (
            "× direct (same round)",
            lambda r, d: "-" if d is None else _ratio(_throughput(r), _throughput(d)),
        ),
        ("served / 429", lambda r, d: f"{r.get('served', '-')} / {r.get('rejected_429', '-')}"),
        (
            "in time / late",
            lambda r, d: f"{r['in_time']} / {r.get('late', 0)}" if "in_time" in r else "-",
        ),
        ("TTFT p99 s, from t=0", lambda r, d: fixed(_p99_from_t0(r))),
        ("TTFT p99 s, settled", lambda r, d: fixed(r.get("ttft_p99"))),
        (
            "TTFT p99 from t=0 − direct's s",
            lambda r, d: "-" if d is None else _difference(_p99_from_t0(r), _p99_from_t0(d)),
        ),
        ("engine running mean", lambda r, d: fixed(r.get("engine_running_mean"), 1)),
        ("engine tok/s from t=0", lambda r, d: fixed(r.get("engine_tokens_per_s_all"), 0)),
        ("preempt", lambda r, d: fixed(r.get("preemptions"), 0)),
        ("first batch: first tokens p50 s", lambda r, d: _batch(r, "first_token_p50")),
        ("first batch: end p50 s", lambda r, d: _batch(r, "end_p50")),
        (
            "first batch: engine core CPU-s",
            lambda r, d: fixed((r.get("engine_cpu_first_batch") or {}).get("core_s")),
        ),
    ]
    body = []
    for r in sorted(
        results, key=lambda r: (r.get("client", ""), order.index(r["target"]), r["repeat"])
    ):
        base = direct.get((r.get("client", "honour"), r["repeat"]))
        if r["target"] == "direct":
            base = None
        body.append(
            [r.get("client", "-"), _name(r["target"]), r["repeat"] + 1]
            + [cell(r, base) for _, cell in columns]
        )
    # Leave out what no round of this run recorded (older runs read less).
    keep = [i for i in range(len(columns)) if any(line[3 + i] != "-" for line in body)]
    headers = ["client", "target", "round"] + [columns[i][0] for i in keep]
    return table(headers, [line[:3] + [line[3 + i] for i in keep] for line in body])


def _batch(r: Record, key: str) -> str:
    batch = r.get("first_batch")
    return fixed(batch.get(key)) if isinstance(batch, dict) else "-"
