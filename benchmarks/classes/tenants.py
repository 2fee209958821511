"""Part 3, *tenants*: an open-loop flood from one tenant beside a light one,
in one class. Poisson arrivals at a multiple (default 2×) of the engine's
capacity (the objectives part's, measured the same way unless given),
tenant A sending ten times tenant B's share; both ask for the same TTFT
objective (default 10 s, in ``x-slo-ttft-ms``), each naming itself in
``X-Tenant-Id``. vLLM serves one class in arrival order, so its queue grows
for the whole run and B's requests wait behind A's flood; a fair share
between tenants serves B's small load at once and refuses A's excess. Each
tenant's attainment, TTFT and tokens per target, and refusals while the
engine had room."""

import argparse
from typing import Any

from benchmarks.classes.load import Send, open_loop, poisson_arrivals
from benchmarks.classes.objectives import capacity
from benchmarks.classes.outcomes import outcome
from benchmarks.classes.requests import Kind, Prompts, body, longest_objective, objectives_of
from benchmarks.classes.room import refusals
from benchmarks.classes.rounds import Run, in_rounds
from benchmarks.classes.run import engine_states, measure, row
from benchmarks.classes.stack import ClassesStack, Serving
from benchmarks.classes.targets import TARGETS, target
from benchmarks.harness import Call, Client

PART = "tenants"


def kinds(args: argparse.Namespace) -> list[Kind]:
    objective = args.tenant_objective
    return [
        Kind("A", "normal", objective, objective_header=True, tenant="tenant-a"),
        Kind("B", "normal", objective, objective_header=True, tenant="tenant-b"),
    ]


def shares(args: argparse.Namespace) -> list[tuple[str, float]]:
    """A's and B's shares of the arrivals: A sends ``--tenant-a-times`` B's."""
    b = 1.0 / (1.0 + args.tenant_a_times)
    return [("A", 1.0 - b), ("B", b)]


async def run_tenants(stack: ClassesStack, args: argparse.Namespace) -> dict[str, Any]:
    targets = TARGETS[PART]
    await stack.engines_for({t.engine for t in targets})
    measured = await capacity(stack, args)
    rate = args.tenants_load * measured["rps"]
    a, b = kinds(args)
    objectives = objectives_of([a, b])
    window_s = args.tenants_seconds + longest_objective([a, b])

    async def one(name: str, r: int) -> Run:
        t = target(PART, name)
        prompts = Prompts(seed=args.seed + r)
        # The same arrivals, tenants and offsets, for every target of the round.
        arrivals = poisson_arrivals(rate, args.tenants_seconds, shares(args), args.seed + r)

        async def load(client: Client, serving: Serving, t0: float) -> list[Call]:
            def sender(kind: Kind) -> Send:
                headers, fields = kind.marks(t.marking)

                async def send() -> Call:
                    request = body(stack.model, prompts.chat(), args.objectives_max_tokens)
                    return await client.stream({**request, **fields}, headers)

                return send

            return await open_loop(arrivals, {k.label: sender(k) for k in (a, b)}, t0, window_s)

        m = await measure(stack, t, f"{PART}-{name}-r{r + 1}", load)
        result = row(m, objectives, args.tenants_seconds, window_s)
        refused = [
            c.finished - m.t0 for c in m.calls if outcome(c, objectives[c.label]) == "refused"
        ]
        result["refusals"] = refusals(refused, engine_states(m), m.serving.max_num_seqs).as_dict()
        say(name, r, result)
        return result

    runs = await in_rounds(args.rounds, [t.name for t in targets], one, shift=2)
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
        f"  tenants, round {r + 1}, {name:<22} A met {pct(k['A']['attainment'])}"
        f" of {k['A']['sent']}  B met {pct(k['B']['attainment'])} of {k['B']['sent']}"
        f"  refused {k['total']['refused']}",
        flush=True,
    )
