"""Part 2, *objectives*: open-loop Poisson arrivals at a multiple (default
2×) of the engine's capacity, measured first in the run (a short
closed-loop saturation of vLLM direct) unless given. A share of the
requests (default a fifth) ask for a tight TTFT objective (1 s, sent as
class high), the rest for a loose one (10 s, class normal), each in
``x-slo-ttft-ms``. Past capacity, vLLM alone queues everything and the
loose class's waits grow for the whole run; a gateway that refuses at once
what would miss its objective keeps what it admits on time. Per class:
attainment; in total: goodput, the share of admitted requests that met,
refusals by reason, and whether any came while the engine had room."""

import argparse
from typing import Any

from benchmarks.classes.load import Send, User, closed_loop, open_loop, poisson_arrivals
from benchmarks.classes.outcomes import outcome
from benchmarks.classes.requests import Kind, Prompts, body, longest_objective, objectives_of
from benchmarks.classes.room import refusals
from benchmarks.classes.rounds import Run, in_rounds
from benchmarks.classes.run import engine_states, measure, row
from benchmarks.classes.stack import ClassesStack, Serving
from benchmarks.classes.targets import TARGETS, target
from benchmarks.harness import Call, Client, num

PART = "objectives"


def kinds(args: argparse.Namespace) -> list[Kind]:
    return [
        Kind("tight", "high", args.tight_objective, objective_header=True),
        Kind("loose", "normal", args.loose_objective, objective_header=True),
    ]


async def capacity(stack: ClassesStack, args: argparse.Namespace) -> dict[str, Any]:
    """Requests a second vLLM direct completes at saturation: closed-loop
    users sending the part's requests (class normal), counted after the
    first fifth of the run (the ramp)."""
    if args.capacity_rps:
        return {"rps": args.capacity_rps, "measured": False}
    t = target(PART, "direct")
    prompts = Prompts(seed=args.seed)
    loose = kinds(args)[1]
    seconds = args.capacity_seconds
    settle = seconds / 5

    async def load(client: Client, serving: Serving, t0: float) -> list[Call]:
        async def send() -> Call:
            return await client.stream(
                body(stack.model, prompts.chat(), args.objectives_max_tokens)
            )

        users = [User(loose.label, send)] * args.capacity_users
        return await closed_loop(users, t0, seconds, seconds + args.loose_objective)

    m = await measure(stack, t, f"{PART}-capacity", load)
    done = [c for c in m.calls if c.status == 200 and m.t0 + settle <= c.finished <= m.t0 + seconds]
    rps = len(done) / (seconds - settle)
    print(f"  objectives: capacity {rps:.2f} requests/s ({args.capacity_users} users)", flush=True)
    return {"rps": rps, "measured": True, "users": args.capacity_users, "seconds": seconds}


async def run_objectives(stack: ClassesStack, args: argparse.Namespace) -> dict[str, Any]:
    targets = TARGETS[PART]
    await stack.engines_for({t.engine for t in targets})
    measured = await capacity(stack, args)
    rate = args.objectives_load * measured["rps"]
    tight, loose = kinds(args)
    objectives = objectives_of([tight, loose])
    window_s = args.objectives_seconds + longest_objective([tight, loose])
    shares = [(tight.label, args.tight_share), (loose.label, 1.0 - args.tight_share)]

    async def one(name: str, r: int) -> Run:
        t = target(PART, name)
        prompts = Prompts(seed=args.seed + r)
        # The same arrivals, kinds and offsets, for every target of the round.
        arrivals = poisson_arrivals(rate, args.objectives_seconds, shares, args.seed + r)

        async def load(client: Client, serving: Serving, t0: float) -> list[Call]:
            def sender(kind: Kind) -> Send:
                headers, fields = kind.marks(t.marking)

                async def send() -> Call:
                    b = body(stack.model, prompts.chat(), args.objectives_max_tokens)
                    return await client.stream({**b, **fields}, headers)

                return send

            senders = {k.label: sender(k) for k in (tight, loose)}
            return await open_loop(arrivals, senders, t0, window_s)

        m = await measure(stack, t, f"{PART}-{name}-r{r + 1}", load)
        result = row(m, objectives, args.objectives_seconds, window_s)
        refused = [
            c.finished - m.t0 for c in m.calls if outcome(c, objectives[c.label]) == "refused"
        ]
        result["refusals"] = refusals(refused, engine_states(m), m.serving.max_num_seqs).as_dict()
        say(name, r, result)
        return result

    runs = await in_rounds(args.rounds, [t.name for t in targets], one, shift=1)
    return {
        "capacity": measured,
        "rate_rps": rate,
        "window_s": window_s,
        "objectives": objectives,
        "runs": runs,
    }


def say(name: str, r: int, result: dict[str, Any]) -> None:
    k = result["kinds"]

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:.0%}"

    print(
        f"  objectives, round {r + 1}, {name:<22} tight met {pct(k['tight']['attainment'])}"
        f"  loose met {pct(k['loose']['attainment'])}  goodput"
        f" {num(k['total']['goodput_per_s'])} tok/s  refused {k['total']['refused']}"
        f" (with room {result['refusals']['with_room']})",
        flush=True,
    )
