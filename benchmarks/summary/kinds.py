"""What each benchmark's summary adds to its tables: the layout it ran in
and its rounds, one function per benchmark kind. A kind with no rounds (each
line of its tables is one measurement) adds nothing."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.classes.targets import layout as classes_layout
from benchmarks.summary import overhead, prefix
from benchmarks.summary.page import fixed, table

Record = dict[str, Any]
Sections = list[tuple[str, str]]


def _engines(result: Record, engines: str, others: str) -> str:
    cpus = (result.get("machine") or {}).get("engine_cpus") or "the launcher's default cores"
    return f"{engines} on {cpus}; {others} not pinned"


def adapters_layout(result: Record) -> str:
    return _engines(result, "two engines", "the gateways and the client")


def adapters_rounds(result: Record) -> Sections:
    body = [
        [
            r["target"],
            r["round"] + 1,
            fixed(r.get("makespan_s")),
            fixed(r.get("ttft_p50_s")),
            fixed(r.get("ttft_p99_s")),
            fixed(r.get("deferred_request_s"), 1),
            "; ".join(f"{e}: {', '.join(a)}" for e, a in (r.get("adapters_ran") or {}).items()),
            r.get("failed", "-"),
        ]
        for r in result.get("runs") or []
    ]
    headers = ["target", "round", "makespan s", "TTFT p50 s", "TTFT p99 s"]
    headers += ["deferred request-s", "adapters each engine ran", "failed"]
    return [("Each round", table(headers, body))]


def tokenizer_read_layout(result: Record) -> str:
    return "no engine, no server: the measured tree's tokenizer reader in a process of its own"


def tokenizer_read_rounds(result: Record) -> Sections:
    from benchmarks.tokenizer_read import MOMENTS

    body = [
        [i + 1, *(f"{ms * 1000:,.1f} ({reads})" for ms, reads in moments)]
        for i, moments in enumerate(result.get("rounds") or [])
    ]
    headers = ["round", *(f"{moment}: ms (files read)" for moment in MOMENTS)]
    return [("Each fresh read", table(headers, body))]


def limits_layout(result: Record) -> str:
    return _engines(result, "the engine", "the gateways, Redis and the client")


def shared_state_layout(result: Record) -> str:
    return "no engine; Redis and the simulated replicas not pinned"


def admission_layout(result: Record) -> str:
    return _engines(result, "the engine", "the gateway and the client")


def cold_start_layout(result: Record) -> str:
    return _engines(result, "each engine started", "the gateway, the scaler and the client")


def cold_start_rounds(result: Record) -> Sections:
    body = [
        [
            r["target"],
            r["round"] + 1,
            fixed(r.get("first_token_s"), 1),
            fixed(r.get("engine_up_s"), 1),
            fixed(r.get("gateway_measured_start_s"), 1),
            fixed(r.get("stopped_after_idle_s"), 1),
            r.get("status"),
        ]
        for r in result.get("runs") or []
    ]
    headers = ["target", "round", "launch to first token s", "engine /health 200 s"]
    headers += ["gateway's cold-start s", "request end to engine stopped s", "status"]
    return [("Each round", table(headers, body))]


def batch_beside_rounds(result: Record) -> Sections:
    keys = ["chat_ttft_p50_s", "chat_ttft_p99_s", "chat_tokens_per_s", "batch_tokens_per_s"]
    keys += ["batch_seconds"]
    body = [
        [
            r["scenario"],
            r["round"] + 1,
            *(fixed(r.get(k), 3) for k in keys),
            r.get("chat_failed", "-"),
        ]
        for r in result.get("runs") or []
    ]
    headers = ["scenario", "round", "chat TTFT p50 s", "chat TTFT p99 s", "chat tokens/s"]
    headers += ["batch tokens/s", "batch completion s", "chat failed"]
    return [("Each round", table(headers, body))]


def no_rounds(result: Record) -> Sections:
    return []


@dataclass(frozen=True)
class Kind:
    """How one benchmark's summary is made beside its tables."""

    layout: Callable[[Record], str]
    rounds: Callable[[Record], Sections]
    tables: Callable[[str], str] = lambda text: text


KINDS: dict[str, Kind] = {
    "overhead": Kind(overhead.layout, overhead.per_round),
    "prefix": Kind(prefix.layout, prefix.per_round, prefix.say_means),
    "adapters": Kind(adapters_layout, adapters_rounds),
    "tokenizer-read": Kind(tokenizer_read_layout, tokenizer_read_rounds),
    "limits": Kind(limits_layout, no_rounds),
    "shared-state": Kind(shared_state_layout, no_rounds),
    "admission": Kind(admission_layout, no_rounds),
    "cold-start": Kind(cold_start_layout, cold_start_rounds),
    "batch-beside": Kind(classes_layout, batch_beside_rounds),
    # Its tables carry each round's rows after the medians.
    "classes": Kind(classes_layout, no_rounds),
}


def kind_of(result: Record) -> str:
    """The benchmark that wrote ``result``: as it recorded itself, or (older
    results, which did not) by what it holds."""
    if isinstance(result.get("benchmark"), str):
        return str(result["benchmark"])
    for key, kind in (
        ("layouts", "overhead"),
        ("rag", "prefix"),
        ("accuracy", "limits"),
        ("fleets", "shared-state"),
        ("vocab", "tokenizer-read"),
        ("burst", "admission"),
        ("runs", "adapters"),
    ):
        if key in result:
            return kind
    raise ValueError("not a result this project's benchmarks write")
