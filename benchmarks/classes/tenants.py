"""Part 3, *tenants*: a flood from one tenant beside a light one, in one
class. Tenant A runs ten times B's closed-loop users (default 40 and 4),
both asking for the same TTFT objective (default 10 s, in
``x-slo-ttft-ms``), each naming itself in ``X-Tenant-Id``. vLLM serves in
arrival order, so B's requests queue behind A's flood; a fair share between
tenants keeps B's waits to B's own load. Each tenant's attainment, TTFT and
tokens per target."""

import argparse
from typing import Any

from benchmarks.classes.load import User, closed_loop
from benchmarks.classes.requests import Kind, Prompts, body, longest_objective, objectives_of
from benchmarks.classes.rounds import Run, in_rounds
from benchmarks.classes.run import measure, row
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


async def run_tenants(stack: ClassesStack, args: argparse.Namespace) -> dict[str, Any]:
    targets = TARGETS[PART]
    await stack.engines_for({t.engine for t in targets})
    a, b = kinds(args)
    objectives = objectives_of([a, b])
    window_s = args.tenants_seconds + longest_objective([a, b])

    async def one(name: str, r: int) -> Run:
        t = target(PART, name)
        prompts = Prompts(seed=args.seed + r)

        async def load(client: Client, serving: Serving, t0: float) -> list[Call]:
            def sender(kind: Kind) -> User:
                headers, fields = kind.marks(t.marking)

                async def send() -> Call:
                    request = body(stack.model, prompts.chat(), args.tenants_max_tokens)
                    return await client.stream({**request, **fields}, headers)

                return User(kind.label, send)

            users = [sender(a)] * args.tenant_a_users + [sender(b)] * args.tenant_b_users
            return await closed_loop(users, t0, args.tenants_seconds, window_s)

        m = await measure(stack, t, f"{PART}-{name}-r{r + 1}", load)
        result = row(m, objectives, args.tenants_seconds, window_s)
        say(name, r, result)
        return result

    runs = await in_rounds(args.rounds, [t.name for t in targets], one, shift=2)
    return {"window_s": window_s, "objectives": objectives, "runs": runs}


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
