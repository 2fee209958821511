"""API keys against real traffic: how exact a tokens-per-minute limit is,
and whether the key's tenant — not the client — decides fairness.

    make bench-limits                      # or: .venv/bin/python -m benchmarks.limits

1. *accuracy*: one key at a tokens-per-minute limit (``--limit`` tokens per
   ``--window`` seconds: ``GATEWAY_RATE_LIMIT_WINDOW``), closed-loop
   streaming users with natural lengths (no ``ignore_eos``, ``max_tokens``
   512: the tiny model's answers end at varied lengths) for ``--seconds``;
   refused users wait ``Retry-After``. Once with one gateway (limits in
   process), once with two gateways sharing the limit through Redis (users
   split between them). From the gateways' access logs (one JSON line per
   request: ``charged_ts``, ``charged_tokens``, ``worst_tokens``,
   ``used_tokens``): the tokens the key was charged in every sliding window
   over ``charged_ts``, against the limit and against the limit plus one
   request's worst case. Beside it, counterfactuals computed from the same
   run's requests (their token counts and durations, replayed by the same
   number of users): a limiter that reserves every request's worst case
   until it ends (the rule before the gateway charged an estimate), and one
   that charges only after the response.
2. *fairness*: two keys (two tenants) at 10:1 load (closed-loop users,
   fixed lengths) through a gateway at a small engine (24 KV blocks): the
   light tenant's share of the tokens admitted while both tenants have
   requests waiting; the same with the heavy client rotating ``X-Tenant-Id``
   on every request (with keys, its tenant stays the key's); and, as the
   control, both without keys, where the header is the tenant.

Prints the tables and writes ``result.json``, ``tables.md``, the keys file
(hashes only) and every process's log under ``--out``.
"""

import argparse
import asyncio
import bisect
import heapq
import itertools
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from app.keys.ring import hash_key
from benchmarks.harness import (
    Call,
    Client,
    Processes,
    Service,
    access_log,
    benchmark_parser,
    closed_loop,
    measured,
    model_name,
    num,
    run_benchmark,
    sections,
    table,
    wait_ready,
)
from loadtests.prompts import PromptFactory

# --- accuracy ----------------------------------------------------------------------


@dataclass
class Windows:
    """Tokens charged in sliding windows of the limiter's length."""

    count: int
    min: float
    mean: float
    max: float

    def pct(self, limit: int) -> str:
        return f"{self.min / limit:.1%} / {self.mean / limit:.1%} / {self.max / limit:.1%}"


def sliding(events: list[tuple[float, int]], window: float, start: float, end: float) -> Windows:
    """Sums of ``events`` (time, tokens) over every window ``(t - window, t]``
    inside the run (``start + window <= t <= end``): min and mean over a
    0.1 s grid of ``t``, max also over every event (where maxima are)."""
    events = sorted(events)
    times = [t for t, _ in events]
    prefix = [0, *itertools.accumulate(tokens for _, tokens in events)]

    def at(t: float) -> int:
        return (
            prefix[bisect.bisect_right(times, t)] - prefix[bisect.bisect_right(times, t - window)]
        )

    first = start + window
    grid = [at(first + i * 0.1) for i in range(int((end - first) / 0.1) + 1)]
    if not grid:
        return Windows(0, 0, 0, 0)
    peaks = [at(t) for t in times if first <= t <= end]
    return Windows(len(grid), min(grid), sum(grid) / len(grid), max(grid + peaks))


@dataclass
class Request:
    start: float
    duration: float
    used: int
    worst: int
    prompt: int = 0


def worst_of(record: dict[str, Any]) -> int:
    """A request's worst case, from its access-log line (``charged_tokens``
    in logs from before the gateway charged an estimate)."""
    return int(record.get("worst_tokens") or record["charged_tokens"])


def replay(
    requests: list[Request], users: int, limit: int, window: float, seconds: float, rule: str
) -> list[tuple[float, int]]:
    """Replay the run's requests (in their order, with their token counts and
    durations) through ``users`` closed-loop users and a limiter: ``worst``
    holds each request's worst case from its start and what it used once it
    ended; ``gateway`` holds the gateway's charge (``app.keys.quota``:
    ``min(W, max(E, U))``); ``under`` holds the worst case but lets a request
    through while the count is under the limit, so a window ends at most one
    worst case above it — the most a rule that keeps that bound can let
    through; ``estimate`` holds only the estimate ``E`` (its prompt and the
    share of its output allowance the requests ended so far wrote) and what
    it used once it ended — a request that wrote more than estimated keeps
    its excess in the log, so it carries into the admissions after it, and
    no stream is cut for it; ``after`` counts a request only once its
    response has ended, and lets a request through while the count is under
    the limit. A refused user tries again at the next 10 ms step. Returns the
    requests let through as (start, tokens used)."""
    step = 0.01
    queue = list(reversed(requests))
    done: list[tuple[float, int]] = []
    # start, end, used, worst, prompt, charged
    active: list[tuple[float, float, int, int, int, int]] = []
    free_at = [0.0] * users
    # The estimate's share: output written over output allowed, of the
    # requests ended so far (1, the worst case, before any has).
    wrote, allowed = 0.0, 0.0
    ending: list[tuple[float, int, int]] = []  # end, output written, output allowed
    for i in range(int(seconds / step)):
        t = i * step
        # What ended before the window can never count again.
        active = [a for a in active if a[1] > t - window]
        while ending and ending[0][0] <= t:
            _, out, out_allowed = heapq.heappop(ending)
            wrote, allowed = wrote + out, allowed + out_allowed
        if rule in ("worst", "estimate", "gateway", "under"):
            count = sum(u if e <= t else c for s, e, u, w, p, c in active if s > t - window)
            unreserved = sum(w - c for s, e, u, w, p, c in active if s > t - window and e > t)
        else:
            count = sum(u for s, e, u, w, p, c in active if e <= t)
        share = wrote / allowed if allowed else 1.0
        for user in range(users):
            if free_at[user] > t:
                continue
            if not queue:
                queue = list(reversed(requests))
            nxt = queue[-1]
            charge = nxt.worst
            estimate = nxt.prompt + round(share * (nxt.worst - nxt.prompt))
            if rule == "estimate":
                charge = estimate
            elif rule == "gateway":
                charge = min(nxt.worst, max(estimate, unreserved))
            if rule in ("worst", "estimate", "gateway") and count + charge > limit:
                break
            if rule == "under" and count >= limit:
                break
            if rule == "after" and count >= limit:
                break
            queue.pop()
            active.append((t, t + nxt.duration, nxt.used, nxt.worst, nxt.prompt, charge))
            if nxt.worst > nxt.prompt:
                written = (nxt.used - nxt.prompt, nxt.worst - nxt.prompt)
                heapq.heappush(ending, (t + nxt.duration, *written))
            done.append((t, nxt.used))
            free_at[user] = t + nxt.duration
            if rule in ("worst", "estimate", "gateway", "under"):
                count += charge
                unreserved += nxt.worst - charge
    return done


async def accuracy(
    args: argparse.Namespace, procs: Processes, out: Path, redis: bool
) -> dict[str, Any]:
    key = secrets.token_urlsafe(24)
    keys_file = out / ("keys-accuracy-redis.yaml" if redis else "keys-accuracy.yaml")
    entry = {
        "id": "bench-tpm",
        "tenant": "acme",
        "sha256": hash_key(key),
        "tokens_per_minute": args.limit,
    }
    keys_file.write_text(yaml.safe_dump({"keys": [entry]}))
    env = {
        "GATEWAY_KEYS_FILE": str(keys_file),
        "GATEWAY_RATE_LIMIT_WINDOW": str(args.window),
        "GATEWAY_LOG_LEVEL": "info",
    }
    engine = procs.engine("engine-accuracy" + ("-redis" if redis else ""))
    wait_ready([engine])
    env["GATEWAY_UPSTREAM_URL"] = engine.url
    gateways: list[Service] = []
    if redis:
        env["GATEWAY_REDIS_URL"] = procs.redis()
        for i in range(2):
            gateways.append(procs.gateway(f"gateway-accuracy-redis-{i}", env, args.src))
    else:
        gateways.append(procs.gateway("gateway-accuracy", env, args.src))
    wait_ready(gateways, timeout=120)
    prompts = PromptFactory(seed=args.seed)
    model = model_name()
    clients = [Client(g.url) for g in gateways]
    for c in clients:
        await c.__aenter__()
    try:

        async def one(user: int) -> Call:
            body = {"model": model, "messages": prompts.chat(), "max_tokens": args.max_tokens}
            return await clients[user % len(clients)].stream(
                body, {"Authorization": f"Bearer {key}"}
            )

        async with measured(clients[0], {}, idle=[engine.url]) as window:
            started_wall = time.time()
            calls = await closed_loop(args.users, args.seconds, one)
        # Windows end where the users stopped sending, not after the last
        # request they were still waiting for.
        ended_wall = started_wall + args.seconds
    finally:
        for c in clients:
            await c.__aexit__()
    records = [r for g in gateways for r in access_log(g) if r.get("key_id") == "bench-tpm"]
    procs.stop_all()
    charged = [r for r in records if r.get("charged_ts") is not None]
    events = [(float(r["charged_ts"]), int(r["used_tokens"] or 0)) for r in charged]
    in_windows = sliding(events, args.window, started_wall, ended_wall)
    worst = max((worst_of(r) for r in charged), default=0)
    # Beyond its worst case only where a prompt was estimated, not counted.
    over_worst = [
        int(r["used_tokens"]) - worst_of(r)
        for r in charged
        if int(r["used_tokens"] or 0) > worst_of(r)
    ]
    # The counterfactual: the same requests replayed through each rule.
    requests = sorted(
        (
            Request(
                start=float(r["charged_ts"]),
                duration=float(r["arrival_ts"]) + float(r["total_s"]) - float(r["charged_ts"]),
                used=int(r["used_tokens"] or 0),
                worst=worst_of(r),
                prompt=int(r.get("prompt_tokens") or 0),
            )
            for r in charged
            if r.get("status") == 200
        ),
        key=lambda r: r.start,
    )
    seconds = ended_wall - started_wall
    replays = {}
    for rule in ("worst", "gateway", "under", "estimate", "after"):
        let_through = replay(requests, args.users, args.limit, args.window, seconds, rule)
        replays[rule] = asdict(sliding(let_through, args.window, 0.0, seconds))
    completions = [c.completion_tokens for c in calls if c.status == 200]
    return {
        "setup": "two gateways, shared through Redis" if redis else "one gateway, in process",
        "limit": args.limit,
        "window_s": args.window,
        "users": args.users,
        "seconds": round(seconds, 1),
        "requests": len(calls),
        "served": sum(1 for c in calls if c.status == 200),
        "refused_429": sum(1 for c in calls if c.status == 429),
        "other_errors": sum(1 for c in calls if c.status not in (200, 429)),
        "completion_tokens_mean": sum(completions) / len(completions) if completions else None,
        "completion_tokens_max": max(completions, default=0),
        "charged_records": len(charged),
        "worst_case_max": worst,
        "charged_mean": sum(int(r["charged_tokens"]) for r in charged) / max(1, len(charged)),
        "worst_mean": sum(worst_of(r) for r in charged) / max(1, len(charged)),
        "used_over_worst_case": len(over_worst),
        "used_over_worst_case_max": max(over_worst, default=0),
        "measured": asdict(in_windows),
        "bound": args.limit + worst,
        "replay_worst": replays["worst"],
        "replay_gateway": replays["gateway"],
        "replay_under": replays["under"],
        "replay_estimate": replays["estimate"],
        "replay_after": replays["after"],
        "others_cores": round(window.others_cores, 3),
    }


def accuracy_table(results: list[dict[str, Any]]) -> str:
    headers = [
        "setup",
        "rule",
        "tokens per window: min / mean / max (of the limit)",
        "max above the limit",
        "limit + one worst case",
        "requests (429)",
    ]
    body = []
    for r in results:
        limit = r["limit"]
        for name, key in (
            ("charge the estimate, up to the worst case; settle to usage (measured)", "measured"),
            ("reserve the worst case, settle to usage (replayed)", "replay_worst"),
            ("the gateway's rule (replayed)", "replay_gateway"),
            ("reserve the worst case, admit while under the limit (replayed)", "replay_under"),
            ("charge the estimate alone, the excess carried (replayed)", "replay_estimate"),
            ("charge after the response (replayed)", "replay_after"),
        ):
            if key not in r:  # a result from before that replay existed
                continue
            w = Windows(**r[key])
            body.append(
                [
                    r["setup"] if key == "measured" else "",
                    name,
                    w.pct(limit),
                    f"{max(0.0, w.max - limit):,.0f}",
                    f"{r['bound']:,}" if key == "measured" else "",
                    f"{r['served']} ({r['refused_429']})" if key == "measured" else "",
                ]
            )
    return table(headers, body)


# --- fairness ------------------------------------------------------------------------


def both_waiting_share(
    records: list[dict[str, Any]], group_of: dict[str, str], light: str, settle: float
) -> dict[str, Any]:
    """The light group's share of the tokens admitted at moments when both
    groups had a request waiting (waiting: arrived, not yet admitted, for
    more than 10 ms)."""
    eps = 0.01
    rows = []
    for r in records:
        group = group_of.get(r["request_id"])
        if group is None or r.get("status") != 200 or r.get("queue_s") is None:
            continue
        arrival = float(r["arrival_ts"])
        rows.append(
            (
                arrival,
                arrival + float(r["queue_s"]),
                group,
                int(r.get("prompt_tokens") or 0) + int(r.get("completion_tokens") or 0),
            )
        )
    if not rows:
        return {"both_waiting_admissions": 0}
    t0 = min(r[0] for r in rows) + settle
    waits: dict[str, list[tuple[float, float]]] = {}
    for arrival, admitted, group, _ in rows:
        if admitted - arrival > eps:
            waits.setdefault(group, []).append((arrival, admitted))

    def waiting(group: str, t: float) -> bool:
        return any(a < t - eps and b >= t for a, b in waits.get(group, []))

    groups = sorted({r[2] for r in rows})
    tokens: dict[str, int] = dict.fromkeys(groups, 0)
    overall: dict[str, int] = dict.fromkeys(groups, 0)
    admissions = 0
    for arrival, admitted, group, used in rows:
        if admitted < t0:
            continue
        overall[group] += used
        if all(waiting(g, admitted) or (g == group and admitted - arrival > eps) for g in groups):
            tokens[group] += used
            admissions += 1
    both = sum(tokens.values())
    all_tokens = sum(overall.values())
    return {
        "both_waiting_admissions": admissions,
        "light_share_both_waiting": tokens.get(light, 0) / both if both else None,
        "light_share_overall": overall.get(light, 0) / all_tokens if all_tokens else None,
        "tokens_both_waiting": tokens,
        "tokens_overall": overall,
    }


async def fairness(args: argparse.Namespace, procs: Processes, out: Path) -> list[dict[str, Any]]:
    keys = {"heavy": secrets.token_urlsafe(24), "light": secrets.token_urlsafe(24)}
    keys_file = out / "keys-fairness.yaml"
    entries = [
        {"id": f"bench-{name}", "tenant": name, "sha256": hash_key(key)}
        for name, key in keys.items()
    ]
    keys_file.write_text(yaml.safe_dump({"keys": entries}))
    engine = procs.engine("engine-fairness", kv_blocks=args.fair_kv_blocks)
    wait_ready([engine])
    base = {"GATEWAY_UPSTREAM_URL": engine.url, "GATEWAY_LOG_LEVEL": "info"}
    keyed_env = {**base, "GATEWAY_KEYS_FILE": str(keys_file)}
    with_keys = procs.gateway("gateway-fair-keys", keyed_env, args.src)
    without = procs.gateway("gateway-fair-nokeys", base, args.src)
    wait_ready([with_keys, without], timeout=120)
    prompts = PromptFactory(seed=args.seed + 1)
    runs = [
        ("keys", False, with_keys),
        ("keys", True, with_keys),
        ("no keys (control)", False, without),
        ("no keys (control)", True, without),
    ]
    results = []
    for mode, rotate, gateway in runs:
        keyed = keys if gateway is with_keys else None
        results.append(await fair_run(args, engine, gateway, keyed, rotate, prompts))
        results[-1]["mode"] = mode
        r = results[-1]
        print(
            f"  fairness {mode}, rotating {rotate}: light share while both wait"
            f" {num(r.get('light_share_both_waiting'), 3)}"
            f" over {r['both_waiting_admissions']} admissions",
            flush=True,
        )
    procs.stop_all()
    return results


async def fair_run(
    args: argparse.Namespace,
    engine: Service,
    gateway: Service,
    keys: dict[str, str] | None,
    rotate: bool,
    prompts: PromptFactory,
) -> dict[str, Any]:
    """One fairness run: light users first, then heavy ones; with ``rotate``
    the heavy client names a new tenant on every request."""
    group_of: dict[str, str] = {}
    counter = itertools.count()
    model = model_name()
    async with Client(gateway.url) as client:

        async def one(user: int) -> Call:
            group = "light" if user < args.light_users else "heavy"
            headers: dict[str, str] = {}
            if keys is not None:
                headers["Authorization"] = f"Bearer {keys[group]}"
            tenant = f"heavy-{next(counter)}" if group == "heavy" and rotate else group
            headers["X-Tenant-Id"] = tenant
            body = {
                "model": model,
                "messages": prompts.chat(),
                "max_tokens": args.fair_max_tokens,
                "ignore_eos": True,
            }
            call = await client.stream(body, headers)
            group_of[call.request_id] = group
            return call

        users = args.light_users + args.heavy_users
        async with measured(client, {}, idle=[engine.url]) as window:
            before = len(access_log(gateway))
            calls = await closed_loop(users, args.fair_seconds, one)
    await asyncio.sleep(0.5)  # the last access-log lines
    records = access_log(gateway)[before:]
    share = both_waiting_share(records, group_of, "light", settle=5.0)
    heavy_tenants = {r["tenant"] for r in records if group_of.get(r["request_id"]) == "heavy"}
    return {
        "heavy_rotates_tenant": rotate,
        "light_users": args.light_users,
        "heavy_users": args.heavy_users,
        "requests": len(calls),
        "served": sum(1 for c in calls if c.status == 200),
        "refused_429": sum(1 for c in calls if c.status == 429),
        "other_errors": sum(1 for c in calls if c.status not in (200, 429)),
        "heavy_tenants_seen": len(heavy_tenants),
        "heavy_tenant_examples": sorted(heavy_tenants)[:3],
        **share,
        "others_cores": round(window.others_cores, 3),
    }


def fairness_table(results: list[dict[str, Any]]) -> str:
    headers = [
        "tenants from",
        "heavy client rotates X-Tenant-Id",
        "light share while both wait",
        "admissions while both wait",
        "light share overall",
        "tenants the heavy client got",
        "served (429)",
    ]
    body = []
    for r in results:
        share = r.get("light_share_both_waiting")
        body.append(
            [
                r["mode"],
                "yes" if r["heavy_rotates_tenant"] else "no",
                "-" if share is None else f"{share:.1%}",
                str(r["both_waiting_admissions"]),
                "-" if r.get("light_share_overall") is None else f"{r['light_share_overall']:.1%}",
                str(r["heavy_tenants_seen"]),
                f"{r['served']} ({r['refused_429']})",
            ]
        )
    return table(headers, body)


# --- main ---------------------------------------------------------------------------


async def run_all(args: argparse.Namespace, procs: Processes, out: Path) -> dict[str, Any]:
    result: dict[str, Any] = {}
    parts = args.parts.split(",")
    if "accuracy" in parts:
        result["accuracy"] = []
        for setup in args.setups.split(","):
            print(f"accuracy ({setup}):", flush=True)
            result["accuracy"].append(await accuracy(args, procs, out, redis=setup == "redis"))
    if "fairness" in parts:
        print("fairness:", flush=True)
        result["fairness"] = await fairness(args, procs, out)
    return result


def render(result: dict[str, Any], args: argparse.Namespace) -> str:
    parts = []
    if result.get("accuracy"):
        parts.append(
            f"Limit accuracy: one key at {args.limit:,} tokens per {args.window} s,"
            f" {args.users} closed-loop streaming users, natural lengths (max_tokens"
            f" {args.max_tokens}), {args.seconds:g} s per setup\n\n"
            + accuracy_table(result["accuracy"])
        )
    if result.get("fairness"):
        parts.append(
            f"Fairness: {args.heavy_users} heavy and {args.light_users} light closed-loop users,"
            f" max_tokens {args.fair_max_tokens} (ignore_eos), engine {args.fair_kv_blocks}"
            f" KV blocks, {args.fair_seconds:g} s per run\n\n" + fairness_table(result["fairness"])
        )
    return sections(parts)


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--parts", default="accuracy,fairness")
    parser.add_argument("--setups", default="local,redis", help="local, redis or both")
    parser.add_argument("--limit", type=int, default=40_000, help="tokens per window")
    parser.add_argument("--window", type=int, default=60, help="seconds")
    parser.add_argument("--users", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--fair-kv-blocks", type=int, default=24)
    parser.add_argument("--heavy-users", type=int, default=80)
    parser.add_argument("--light-users", type=int, default=8)
    parser.add_argument("--fair-max-tokens", type=int, default=256)
    parser.add_argument("--fair-seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=31)
    args = parser.parse_args()
    if args.window * 2 > args.seconds:
        parser.error("--seconds must cover at least two windows")
    args.src = Path(args.gateway_src)
    run_benchmark(
        "limits",
        args,
        lambda procs, out: run_all(args, procs, out),
        lambda result: render(result, args),
    )


if __name__ == "__main__":
    main()
