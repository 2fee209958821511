"""What the prefix benchmark's runs add up to: each setting's runs of a mix
together, and (``chat`` prompts) the estimate of a shared prefix against the
engine's count."""

from typing import Any

from app.admission.estimate import PromptTokenEstimator
from app.routing.prefix_key import CHUNK_CHARS
from benchmarks.harness import Client, Service, access_log
from benchmarks.prefix.prompts import CHAT, Documents
from benchmarks.prefix.settings import BLOCK_SIZE, Setting


async def estimate_error(
    targets: dict[Setting, Service],
    chars: dict[str, int],
    engine: Service,
    model: str,
    docs: Documents,
) -> dict[str, Any]:
    """The gateway's prompt estimate against the engine's count for each
    document alone: the estimator fitted on the runs' requests (characters
    and ``usage.prompt_tokens`` from the access logs, in order), and the
    default one a gateway starts with."""
    fitted = PromptTokenEstimator()
    for setting, target in targets.items():
        if setting.router:
            continue
        for record in access_log(target):
            length = chars.get(record["request_id"])
            tokens = record.get("prompt_tokens")
            if length is not None and tokens and record.get("outcome") == "completed":
                fitted.observe("chat", length, int(tokens))
    cold = PromptTokenEstimator()
    rows: list[dict[str, Any]] = []
    block = BLOCK_SIZE
    async with Client(engine.url) as client:
        for doc in docs.docs:
            text = docs.system(doc)
            body = {
                "model": model,
                "messages": [{"role": "system", "content": text}],
                "max_tokens": 1,
            }
            call = await client.complete(body, path=CHAT)
            if call.status != 200 or call.prompt_tokens is None:
                continue
            engine_tokens = int(call.prompt_tokens)
            # What prefix-aware demand counts: the tokens up to the last whole
            # piece of CHUNK_CHARS characters.
            pieces = len(text) // CHUNK_CHARS
            rows.append(
                {
                    "chars": len(text),
                    "engine_tokens": engine_tokens,
                    "fitted": fitted.estimate("chat", len(text)),
                    "default": cold.estimate("chat", len(text)),
                    "fitted_whole_pieces": fitted.estimate("chat", pieces * CHUNK_CHARS),
                    "engine_blocks": engine_tokens // block,
                    "fitted_blocks": fitted.estimate("chat", pieces * CHUNK_CHARS) // block,
                }
            )
    for r in rows:
        r["fitted_error"] = (r["fitted"] - r["engine_tokens"]) / r["engine_tokens"]
        r["default_error"] = (r["default"] - r["engine_tokens"]) / r["engine_tokens"]
    return {"documents": rows}


def aggregate(runs: list[dict[str, Any]], mix: str) -> list[dict[str, Any]]:
    out = []
    for name in dict.fromkeys(r["setting"] for r in runs):
        mine = [r for r in runs if r["mix"] == mix and r["setting"] == name]
        if not mine:
            continue
        queries = sum(r["prefix_queries"] for r in mine)

        def mean(key: str, rows: list[dict[str, Any]] = mine) -> float | None:
            values = [r[key] for r in rows if r[key] is not None]
            return sum(values) / len(values) if values else None

        def total(key: str, rows: list[dict[str, Any]] = mine) -> float | None:
            values = [r[key] for r in rows if r[key] is not None]
            return sum(values) if values else None

        hits = sum((r["hit_rate"] or 0) * r["prefix_queries"] for r in mine)
        out.append(
            {
                "mix": mix,
                "setting": name,
                "runs": len(mine),
                "hit_rate": hits / queries if queries else None,
                "hit_rate_runs": [r["hit_rate"] for r in mine],
                "ttft_p50": mean("ttft_p50"),
                "ttft_p99": mean("ttft_p99"),
                "tokens_per_s": mean("tokens_per_s"),
                "preemptions": sum(r["preemptions"] for r in mine),
                "served": sum(r["served"] for r in mine),
                "refused": sum(r["refused"] for r in mine),
                "errors": sum(r["errors"] for r in mine),
                "affinity_hits": total("affinity_hits"),
                "load_cap_overrides": total("load_cap_overrides"),
                "kv_fallbacks": total("kv_fallbacks"),
                "affinity_waits": total("affinity_waits"),
                "max_over_mean_max": max(
                    (r["max_over_mean_max"] for r in mine if r["max_over_mean_max"]), default=None
                ),
                "max_over_mean_mean": mean("max_over_mean_mean"),
                "samples_over_cap": sum(r["samples_over_cap"] for r in mine),
                "in_flight_samples": sum(r["in_flight_samples"] for r in mine),
                "in_flight_mean": mean("in_flight_mean"),
            }
        )
    return out
