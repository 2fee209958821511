"""What the gateway costs on the hot path, and where overload waits.

    make bench-overhead                    # or: .venv/bin/python -m benchmarks.overhead
    make bench-overhead BENCH_ARGS="--gateway-src /tmp/gw-before"   # an older commit
    .venv/bin/python -m benchmarks.overhead --compare BEFORE.json AFTER.json

Starts its own engine (CPU, tiny model) with a KV cache large enough that 64
streams never preempt (``VLLM_CPU_KVCACHE_SPACE=2`` GiB, no block override,
``--max-num-seqs 128``), so what differs between the targets is the relay,
not admission; and two gateways in front of it, admission off and on, run
from ``--gateway-src`` (default: this repository; a ``git worktree`` of an
older commit measures that commit with the same harness). Then:

1. *rows*: closed-loop streaming users (1, 8, 32, 64) and a non-streaming
   row, ``max_tokens`` 128, ``ignore_eos``, unique prompts; each row runs
   against vLLM directly and through both gateways, in rotated order, for
   ``--repeats`` rounds of ``--seconds``, so machine noise cancels in the
   ratio of runs made side by side. Per row and target: the paired throughput
   ratio gateway/direct, TTFT p50/p99 and what the gateway adds to them, ITL
   p50/p99 (gaps between content events as the client reads them), and CPU
   seconds per 1,000 streamed tokens of the gateway's process tree (from
   /proc, before and after each run; tokens from the responses' ``usage``).
   vLLM's own API-server process and the client are measured the same way,
   for scale.
2. *profile*: py-spy on a gateway at 32 streams; the raw stacks are kept and
   summarised (busy share, top frames by share, share by package).
3. *overload*: 256 closed-loop users, ``max_tokens`` 256, against the same
   engine directly and through the gateways: served TTFT, 429s, and where the
   excess waits — the engine's ``vllm:num_requests_waiting`` against the
   gateway's ``gateway_queue_depth``, both sampled every second.

Only settings every gateway version understands are passed
(``GATEWAY_HOST``, ``GATEWAY_PORT``, ``GATEWAY_UPSTREAM_URL``,
``GATEWAY_ADMISSION``); ``--gateway-env K=V`` adds more.
Prints the tables and writes ``result.json``, ``tables.md``, the profiles and
every process's log under ``--out`` (default ``reports/overhead-<time>``).
"""

import argparse
import asyncio
import collections
import json
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    Bench,
    Call,
    Client,
    Processes,
    Service,
    Window,
    benchmark_parser,
    closed_loop,
    cpu_seconds,
    ms,
    num,
    own_cpu,
    q,
    run_benchmark,
    sections,
    table,
    tokens_within,
    tree_cpu,
    wait_ready,
)
from loadtests.prompts import PromptFactory

TARGETS = ("direct", "off", "on")
PREEMPTIONS = "vllm:num_preemptions_total"
NAMES = {"direct": "vLLM direct", "off": "gateway, admission off", "on": "gateway, admission on"}


@dataclass
class Row:
    label: str
    users: int
    streaming: bool


@dataclass
class Run:
    row: str
    target: str
    repeat: int
    window_s: float
    requests: int
    errors: int
    tokens: int
    tokens_per_s: float
    ttft_p50: float | None
    ttft_p99: float | None
    itl_p50: float | None
    itl_p99: float | None
    gateway_cpu_s: float | None
    engine_api_cpu_s: float
    client_cpu_s: float
    preemptions: float
    others_cores: float
    ttfts: list[float] = field(default_factory=list, repr=False)
    gaps: list[float] = field(default_factory=list, repr=False)

    def summary(self) -> dict[str, Any]:
        data = asdict(self)
        del data["ttfts"], data["gaps"]
        return data


@dataclass
class Snapshot:
    gateway: float | None
    engine_api: float
    client: float


class OverheadBench(Bench):
    """One engine and two gateways in front of it, admission off and on."""

    def __init__(self, args: argparse.Namespace, procs: Processes) -> None:
        super().__init__(procs)
        self.args = args
        self.gateways: dict[str, Service] = {}
        self.prompts = PromptFactory(seed=args.seed)

    def start(self) -> None:
        args = self.args
        self.engines = [
            self.procs.engine(
                "engine", kv_space_gib=args.kv_space_gib, max_num_seqs=args.max_num_seqs
            )
        ]
        wait_ready(self.engines)
        extra = dict(kv.split("=", 1) for kv in args.gateway_env)
        for target, env in (("off", {"GATEWAY_ADMISSION": "off"}), ("on", {})):
            self.gateways[target] = self.procs.gateway(
                f"gateway-{target}",
                {"GATEWAY_UPSTREAM_URL": self.engine.url, **env, **extra},
                Path(args.gateway_src),
            )
        wait_ready(self.gateways.values(), timeout=120)

    def url(self, target: str) -> str:
        return self.engine.url if target == "direct" else self.gateways[target].url

    def body(self, max_tokens: int) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": self.prompts.chat(),
            "max_tokens": max_tokens,
            "ignore_eos": True,
        }

    def snapshot(self, target: str) -> Snapshot:
        gateway = self.gateways.get(target)
        # The launcher execs the API server: its own process, not the engine
        # core and workers under it.
        api = cpu_seconds([self.engine.pid]).get(self.engine.pid, 0.0)
        return Snapshot(tree_cpu(gateway.pid) if gateway else None, api, own_cpu())

    async def run(self, row: Row, target: str, repeat: int, seconds: float, max_tokens: int) -> Run:
        """One closed-loop run; CPU read before and after; requests still
        running at the end are waited for."""
        async with Client(self.url(target)) as client:

            async def one(user: int) -> Call:
                body = self.body(max_tokens)
                return await (client.stream(body) if row.streaming else client.complete(body))

            async with self.measure(client, (PREEMPTIONS,)) as window:
                before = self.snapshot(target)
                calls = await closed_loop(row.users, seconds, one)
                after = self.snapshot(target)
        return summarise(row, target, repeat, seconds, calls, window, before, after)


def summarise(
    row: Row,
    target: str,
    repeat: int,
    seconds: float,
    calls: list[Call],
    window: Window,
    before: Snapshot,
    after: Snapshot,
) -> Run:
    # The first moments are left out of rates and latencies: every user
    # starts at once.
    settle = min(2.0, seconds / 5)
    start, end = window.started + settle, window.started + seconds
    ok = [c for c in calls if c.status == 200]
    measured = [c for c in ok if c.started >= start]
    ttfts = [t for c in measured if (t := c.ttft) is not None]
    gaps = [g for c in measured for g in c.gaps]
    gateway_cpu = None
    if before.gateway is not None and after.gateway is not None:
        gateway_cpu = after.gateway - before.gateway
    return Run(
        row=row.label,
        target=target,
        repeat=repeat,
        window_s=round(end - start, 2),
        requests=len(calls),
        errors=len(calls) - len(ok),
        tokens=sum(c.completion_tokens for c in ok),
        tokens_per_s=tokens_within(ok, start, end) / (end - start),
        ttft_p50=q(ttfts, 0.5),
        ttft_p99=q(ttfts, 0.99),
        itl_p50=q(gaps, 0.5),
        itl_p99=q(gaps, 0.99),
        gateway_cpu_s=gateway_cpu,
        engine_api_cpu_s=after.engine_api - before.engine_api,
        client_cpu_s=after.client - before.client,
        preemptions=window.delta(PREEMPTIONS),
        others_cores=round(window.others_cores, 3),
        ttfts=ttfts,
        gaps=gaps,
    )


# --- rows ------------------------------------------------------------------------


def rows_of(args: argparse.Namespace) -> list[Row]:
    rows = [Row(str(n), n, True) for n in args.streams]
    if args.non_stream_users:
        rows.append(Row(f"{args.non_stream_users} non-streaming", args.non_stream_users, False))
    return rows


async def run_rows(bench: OverheadBench, args: argparse.Namespace) -> list[Run]:
    rows = rows_of(args)
    runs: list[Run] = []
    for repeat in range(args.repeats):
        for i, row in enumerate(rows):
            # Rotated order: no target always runs first (or last) in a round.
            k = (repeat + i) % len(TARGETS)
            for target in TARGETS[k:] + TARGETS[:k]:
                run = await bench.run(row, target, repeat, args.seconds, args.max_tokens)
                runs.append(run)
                print(
                    f"  round {repeat + 1}, {row.label:>16}, {NAMES[target]:<24}"
                    f" {run.tokens_per_s:8.0f} tok/s  TTFT p50 {ms(run.ttft_p50)} ms"
                    f"  errors {run.errors}  preempt {run.preemptions:.0f}",
                    flush=True,
                )
    return runs


def aggregate(runs: list[Run], rows: list[Row]) -> list[dict[str, Any]]:
    """Per row and target: pooled latencies, CPU per 1k tokens, and the
    throughput ratio to the direct run of the same round."""
    out: list[dict[str, Any]] = []
    by_key = {(r.row, r.target, r.repeat): r for r in runs}
    for row in rows:
        direct = [r for r in runs if r.row == row.label and r.target == "direct"]
        d_ttft = [t for r in direct for t in r.ttfts]
        for target in TARGETS:
            mine = [r for r in runs if r.row == row.label and r.target == target]
            if not mine:
                continue
            ratios = []
            for r in mine:
                base = by_key.get((row.label, "direct", r.repeat))
                if base is not None and base.tokens_per_s > 0:
                    ratios.append(r.tokens_per_s / base.tokens_per_s)
            ttfts = [t for r in mine for t in r.ttfts]
            gaps = [g for r in mine for g in r.gaps]
            tokens = sum(r.tokens for r in mine)
            gw_cpu = [r.gateway_cpu_s for r in mine if r.gateway_cpu_s is not None]

            def per_1k(cpu: float, tokens: int = tokens) -> float | None:
                return 1000 * cpu / tokens if tokens else None

            p50, p99 = q(ttfts, 0.5), q(ttfts, 0.99)
            d50, d99 = q(d_ttft, 0.5), q(d_ttft, 0.99)
            out.append(
                {
                    "row": row.label,
                    "target": target,
                    "runs": len(mine),
                    "tokens_per_s": sum(r.tokens_per_s for r in mine) / len(mine),
                    "ratio": sum(ratios) / len(ratios) if ratios else None,
                    "ratio_min": min(ratios) if ratios else None,
                    "ratio_max": max(ratios) if ratios else None,
                    "ttft_p50": p50,
                    "ttft_p99": p99,
                    "added_ttft_p50": None if p50 is None or d50 is None else p50 - d50,
                    "added_ttft_p99": None if p99 is None or d99 is None else p99 - d99,
                    "itl_p50": q(gaps, 0.5),
                    "itl_p99": q(gaps, 0.99),
                    "gateway_cpu_per_1k": per_1k(sum(gw_cpu)) if gw_cpu else None,
                    "engine_api_cpu_per_1k": per_1k(sum(r.engine_api_cpu_s for r in mine)),
                    "client_cpu_per_1k": per_1k(sum(r.client_cpu_s for r in mine)),
                    "errors": sum(r.errors for r in mine),
                    "preemptions": sum(r.preemptions for r in mine),
                    "others_cores_max": max(r.others_cores for r in mine),
                }
            )
    return out


def rows_table(agg: list[dict[str, Any]]) -> str:
    headers = [
        "users",
        "target",
        "tok/s",
        "ratio to direct (min–max)",
        "TTFT p50 ms",
        "added p50 ms",
        "TTFT p99 ms",
        "added p99 ms",
        "ITL p50 ms",
        "ITL p99 ms",
        "gateway CPU-s/1k tok",
        "vLLM API CPU-s/1k tok",
        "client CPU-s/1k tok",
        "preempt",
        "errors",
    ]
    body = []
    for a in agg:
        direct = a["target"] == "direct"
        ratio = "-"
        if not direct and a["ratio"] is not None:
            ratio = f"{a['ratio']:.2f} ({a['ratio_min']:.2f}–{a['ratio_max']:.2f})"
        body.append(
            [
                a["row"],
                NAMES[a["target"]],
                num(a["tokens_per_s"]),
                ratio,
                ms(a["ttft_p50"]),
                "-" if direct else ms(a["added_ttft_p50"]),
                ms(a["ttft_p99"]),
                "-" if direct else ms(a["added_ttft_p99"]),
                ms(a["itl_p50"], 2),
                ms(a["itl_p99"], 2),
                num(a["gateway_cpu_per_1k"], 3),
                num(a["engine_api_cpu_per_1k"], 3),
                num(a["client_cpu_per_1k"], 3),
                num(a["preemptions"]),
                str(a["errors"]),
            ]
        )
    return table(headers, body)


# --- profile -----------------------------------------------------------------------

_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")


def _frame(raw: str) -> tuple[str, str]:
    m = _FRAME.match(raw.strip())
    if m is None:
        return raw.strip(), ""
    return m["func"], m["file"]


def _where(path: str, src: str) -> tuple[str, str]:
    """(package, short path) of a source file named in a profile."""
    if "site-packages/" in path:
        short = path.split("site-packages/", 1)[1]
        return short.split("/", 1)[0].removesuffix(".py"), short
    if src and path.startswith(src.rstrip("/") + "/"):
        return "gateway (app/)", path[len(src.rstrip("/")) + 1 :]
    m = re.search(r"/lib/python3\.\d+/(.+)$", path)
    if m:
        return "stdlib " + m[1].split("/", 1)[0].removesuffix(".py"), m[1]
    if path.startswith("<frozen "):
        return "stdlib", path
    return path or "?", path


# A sample whose innermost Python frame is the event loop's own run call is
# time in the loop's C code (uvloop, httptools, the transports' writes).
_LOOP_FRAMES = {"Runner.run", "run_until_complete", "run_forever"}


def summarise_profile(
    raw: str, seconds: float, rate: int, src: str, top: int = 15
) -> dict[str, Any]:
    """From py-spy's raw (collapsed) stacks: the share of wall time the
    gateway's threads were busy, the functions most often on the stack
    (inclusive) and at its top (self), and self time by package."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    packages: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        samples += count
        frames = [_frame(f) for f in stack.split(";") if f]
        places = [_where(path, src) for _, path in frames]
        names = [f"{func} ({short})" for (func, _), (_, short) in zip(frames, places, strict=True)]
        for name in set(names):
            inclusive[name] += count
        if frames:
            own[names[-1]] += count
            leaf = frames[-1][0]
            packages["event loop C code" if leaf in _LOOP_FRAMES else places[-1][0]] += count
    share = 1 / samples if samples else 0.0

    def ranked(counter: collections.Counter[str]) -> list[tuple[str, float]]:
        return [(name, round(n * share, 4)) for name, n in counter.most_common(top)]

    # Frames on (nearly) every stack are the event loop's own; the rest say
    # where the time goes.
    roots = {name for name, n in inclusive.items() if n * share >= 0.9}
    hot = collections.Counter({k: v for k, v in inclusive.items() if k not in roots})
    return {
        "samples": samples,
        "seconds": seconds,
        "rate": rate,
        "busy_share": round(samples / (seconds * rate), 3) if seconds else None,
        "top_inclusive": ranked(hot),
        "top_self": ranked(own),
        "by_package": ranked(packages),
        "roots": sorted(roots),
    }


def profile_table(profile: dict[str, Any]) -> str:
    rows = [["inclusive", name, f"{share:.1%}"] for name, share in profile["top_inclusive"]]
    rows += [["self", name, f"{share:.1%}"] for name, share in profile["top_self"]]
    rows += [["package (self)", name, f"{share:.1%}"] for name, share in profile["by_package"]]
    return table(["kind", "frame", "share of samples"], rows)


async def run_profile(bench: OverheadBench, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    src = args.gateway_src_resolved
    profiles: dict[str, Any] = {}
    for target in args.profile_targets:
        gateway = bench.gateways[target]
        path = out / f"profile-{target}.txt"
        row = Row(str(args.profile_streams), args.profile_streams, True)
        argv = [spy, "record", "-p", str(gateway.pid), "-d", str(round(args.profile_seconds))]
        argv += ["-r", str(args.profile_rate), "-f", "raw", "-o", str(path), "--nonblocking"]
        argv += ["--full-filenames"]

        async def spy_later(argv: list[str] = argv) -> int:
            await asyncio.sleep(2.0)
            proc = await asyncio.create_subprocess_exec(
                *argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
            _, err = await proc.communicate()
            if proc.returncode:
                print(f"py-spy failed: {err.decode(errors='replace')[-500:]}", file=sys.stderr)
            return proc.returncode or 0

        spying = asyncio.create_task(spy_later())
        run = await bench.run(row, target, -1, args.profile_seconds + 4, args.max_tokens)
        if await spying != 0 or not path.exists():
            continue
        summary = summarise_profile(path.read_text(), args.profile_seconds, args.profile_rate, src)
        summary["tokens_per_s_while_profiled"] = round(run.tokens_per_s)
        profiles[target] = summary
    return profiles


# --- overload ----------------------------------------------------------------------

ENGINE_SERIES = (
    "vllm:num_requests_waiting",
    "vllm:num_requests_running",
)
GATEWAY_SERIES = ("gateway_queue_depth", "gateway_requests_in_flight")


async def run_overload(bench: OverheadBench, args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    for repeat in range(args.overload_repeats):
        k = repeat % len(args.overload_targets)
        order = args.overload_targets[k:] + args.overload_targets[:k]
        for target in order:
            results.append(await overload_once(bench, args, target, repeat))
            r = results[-1]
            print(
                f"  overload {NAMES[target]:<24} served {r['served']}/{r['sent']}"
                f"  429 {r['rejected_429']}  TTFT p99 {num(r['ttft_p99'], 2)} s"
                f"  engine waiting max {num(r['engine_waiting_max'])}"
                f"  gateway queue max {num(r['gateway_queue_max'])}",
                flush=True,
            )
    return results


async def overload_once(
    bench: OverheadBench, args: argparse.Namespace, target: str, repeat: int
) -> dict[str, Any]:
    url = bench.url(target)
    async with Client(url) as client:
        sampled = {"engine": bench.engine.url}
        if target != "direct":
            sampled["gateway"] = url

        async def one(user: int) -> Call:
            return await client.stream(bench.body(args.overload_max_tokens))

        async with bench.measure(
            client, (PREEMPTIONS,), sampled=sampled, series=ENGINE_SERIES + GATEWAY_SERIES
        ) as window:
            calls = await closed_loop(args.overload_users, args.overload_seconds, one)
    settle = min(5.0, args.overload_seconds / 5)
    start, end = window.started + settle, window.started + args.overload_seconds
    served = [c for c in calls if c.status == 200]
    ttfts = [t for c in served if c.started >= start and (t := c.ttft) is not None]
    waiting = window.series("engine", "vllm:num_requests_waiting", start, end)
    running = window.series("engine", "vllm:num_requests_running", start, end)
    queue = window.series("gateway", "gateway_queue_depth", start, end)

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    return {
        "target": target,
        "repeat": repeat,
        "sent": len(calls),
        "served": len(served),
        "rejected_429": sum(1 for c in calls if c.status == 429),
        "other_errors": sum(1 for c in calls if c.status not in (200, 429)),
        "tokens_per_s": tokens_within(served, start, end) / (end - start),
        "ttft_p50": q(ttfts, 0.5),
        "ttft_p99": q(ttfts, 0.99),
        "engine_waiting_mean": mean(waiting),
        "engine_waiting_max": max(waiting) if waiting else None,
        "engine_running_mean": mean(running),
        "gateway_queue_mean": mean(queue),
        "gateway_queue_max": max(queue) if queue else None,
        "preemptions": window.delta(PREEMPTIONS),
        "others_cores": round(window.others_cores, 3),
    }


def overload_table(results: list[dict[str, Any]]) -> str:
    headers = [
        "target",
        "served/sent",
        "429s",
        "other errors",
        "tok/s",
        "served TTFT p50 s",
        "served TTFT p99 s",
        "engine waiting mean/max",
        "gateway queue mean/max",
        "engine running mean",
        "preempt",
    ]
    body = []
    for r in results:
        queue = f"{num(r['gateway_queue_mean'], 1)} / {num(r['gateway_queue_max'])}"
        body.append(
            [
                NAMES[r["target"]],
                f"{r['served']}/{r['sent']}",
                str(r["rejected_429"]),
                str(r["other_errors"]),
                num(r["tokens_per_s"]),
                num(r["ttft_p50"], 2),
                num(r["ttft_p99"], 2),
                f"{num(r['engine_waiting_mean'], 1)} / {num(r['engine_waiting_max'])}",
                queue if r["target"] != "direct" else "-",
                num(r["engine_running_mean"], 1),
                num(r["preemptions"]),
            ]
        )
    return table(headers, body)


# --- main -----------------------------------------------------------------------------


async def run_all(bench: OverheadBench, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    result: dict[str, Any] = {}
    # Warm-up: the engine compiles and allocates on its first requests; the
    # gateways fit their prompt estimates.
    for target in TARGETS:
        await bench.run(Row("warm-up", 8, True), target, -1, 3.0, 32)
    parts = set(args.parts.split(","))
    if "rows" in parts:
        print("rows:", flush=True)
        runs = await run_rows(bench, args)
        result["runs"] = [r.summary() for r in runs]
        result["rows"] = aggregate(runs, rows_of(args))
    if "profile" in parts:
        print("profile:", flush=True)
        result["profile"] = await run_profile(bench, args, out)
    if "overload" in parts:
        print("overload:", flush=True)
        result["overload"] = await run_overload(bench, args)
    return result


def render(result: dict[str, Any], args: argparse.Namespace) -> str:
    parts = []
    if "rows" in result:
        parts.append(
            f"Overhead: closed-loop users, max_tokens {args.max_tokens}, ignore_eos,"
            f" {args.repeats} rounds of {args.seconds:g} s; gateway source {result['gateway_src']}"
            f" ({result['gateway_commit']})\n\n" + rows_table(result["rows"])
        )
    for target, profile in result.get("profile", {}).items():
        parts.append(
            f"py-spy, {NAMES[target]}, {args.profile_streams} streams, {args.profile_seconds:g} s:"
            f" {profile['samples']} samples, busy {profile['busy_share']:.0%} of wall time\n\n"
            + profile_table(profile)
        )
    if "overload" in result:
        parts.append(
            f"Overload: {args.overload_users} closed-loop users, max_tokens"
            f" {args.overload_max_tokens}, {args.overload_seconds:g} s, engine --max-num-seqs"
            f" {args.max_num_seqs}\n\n" + overload_table(result["overload"])
        )
    return sections(parts)


def compare(before_path: str, after_path: str) -> str:
    """Two results (e.g. an older commit and this one) side by side."""
    before, after = (json.loads(Path(p).read_text()) for p in (before_path, after_path))
    index = {(a["row"], a["target"]): a for a in before.get("rows", [])}
    headers = [
        "users",
        "target",
        "ratio before",
        "ratio after",
        "added TTFT p50 ms before",
        "after",
        "ITL p50 ms before",
        "after",
        "gateway CPU-s/1k before",
        "after",
    ]
    body = []
    for a in after.get("rows", []):
        if a["target"] == "direct":
            continue
        b = index.get((a["row"], a["target"]), {})
        body.append(
            [
                a["row"],
                NAMES[a["target"]],
                num(b.get("ratio"), 2),
                num(a["ratio"], 2),
                ms(b.get("added_ttft_p50"), 2),
                ms(a["added_ttft_p50"], 2),
                ms(b.get("itl_p50"), 2),
                ms(a["itl_p50"], 2),
                num(b.get("gateway_cpu_per_1k"), 3),
                num(a["gateway_cpu_per_1k"], 3),
            ]
        )
    return (
        f"before: {before.get('gateway_commit')}  after: {after.get('gateway_commit')}\n\n"
        + table(headers, body)
        + "\n"
    )


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--gateway-env", action="append", default=[], metavar="K=V")
    parser.add_argument("--parts", default="rows,profile,overload")
    parser.add_argument(
        "--streams", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8, 32, 64]
    )
    parser.add_argument("--non-stream-users", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kv-space-gib", type=int, default=2)
    parser.add_argument("--max-num-seqs", type=int, default=128)
    parser.add_argument("--profile-targets", type=lambda s: s.split(","), default=["on"])
    parser.add_argument("--profile-streams", type=int, default=32)
    parser.add_argument("--profile-seconds", type=int, default=15)
    parser.add_argument("--profile-rate", type=int, default=100)
    parser.add_argument("--overload-users", type=int, default=256)
    parser.add_argument("--overload-max-tokens", type=int, default=256)
    parser.add_argument("--overload-seconds", type=float, default=60.0)
    parser.add_argument("--overload-repeats", type=int, default=1)
    parser.add_argument(
        "--overload-targets", type=lambda s: s.split(","), default=["direct", "off", "on"]
    )
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        print(compare(*args.compare))
        return
    args.gateway_src_resolved = str(Path(args.gateway_src).resolve())

    async def run(procs: Processes, out: Path) -> dict[str, Any]:
        bench = OverheadBench(args, procs)
        bench.start()
        return await run_all(bench, args, out)

    run_benchmark("overhead", args, run, lambda result: render(result, args))


if __name__ == "__main__":
    main()
