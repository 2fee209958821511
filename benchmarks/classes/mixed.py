"""Part 1, *mixed*: bulk work and chat on ``make up``'s engine. Bulk users
(class low: fixed-length documents, long answers, back to back) fill the KV
cache; a few chat users (class high: short answers, a think time between
them) need their first token soon. vLLM ordering by arrival (fcfs) makes
chat wait behind bulk; ordering by priority with the class in the body is
what vLLM alone does best — the anchor; the gateway passes the class on and
queues in front. What each target gives each class, and what the bulk work
pays for it."""

import argparse
from typing import Any

from benchmarks.classes.load import User, closed_loop
from benchmarks.classes.requests import Kind, Prompts, body, longest_objective, objectives_of
from benchmarks.classes.rounds import Run, in_rounds
from benchmarks.classes.run import measure, row
from benchmarks.classes.stack import ClassesStack, Serving
from benchmarks.classes.targets import TARGETS, target
from benchmarks.harness import Call, Client, num

PART = "mixed"


def kinds(args: argparse.Namespace) -> list[Kind]:
    return [
        Kind("chat", "high", args.chat_objective),
        Kind("bulk", "low", args.bulk_objective),
    ]


async def run_mixed(stack: ClassesStack, args: argparse.Namespace) -> dict[str, Any]:
    targets = TARGETS[PART]
    await stack.engines_for({t.engine for t in targets})
    chat, bulk = kinds(args)
    objectives = objectives_of([chat, bulk])
    window_s = args.mixed_seconds + longest_objective([chat, bulk])

    async def one(name: str, r: int) -> Run:
        t = target(PART, name)
        prompts = Prompts(seed=args.seed + r)

        async def load(client: Client, serving: Serving, t0: float) -> list[Call]:
            def sender(kind: Kind, words: int | None, max_tokens: int) -> User:
                headers, fields = kind.marks(t.marking)

                async def send() -> Call:
                    messages = prompts.chat() if words is None else prompts.bulk(words)
                    return await client.stream(
                        {**body(stack.model, messages, max_tokens), **fields}, headers
                    )

                think = args.chat_think if kind is chat else 0.0
                return User(kind.label, send, think)

            users = [sender(bulk, args.bulk_words, args.bulk_max_tokens)] * args.bulk_users
            users += [sender(chat, None, args.chat_max_tokens)] * args.chat_users
            return await closed_loop(users, t0, args.mixed_seconds, window_s)

        m = await measure(stack, t, f"{PART}-{name}-r{r + 1}", load)
        result = row(m, objectives, args.mixed_seconds, window_s)
        say(name, r, result)
        return result

    runs = await in_rounds(args.rounds, [t.name for t in targets], one)
    return {"window_s": window_s, "objectives": objectives, "runs": runs}


def say(name: str, r: int, result: dict[str, Any]) -> None:
    kinds_ = result["kinds"]

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{v:.0%}"

    print(
        f"  mixed, round {r + 1}, {name:<22} chat met {pct(kinds_['chat']['attainment'])}"
        f" (p99 {num(kinds_['chat']['ttft_p99'], 2)} s)  bulk met"
        f" {pct(kinds_['bulk']['attainment'])}  output {kinds_['total']['output_tokens']:,} tokens"
        f"  refused {kinds_['total']['refused']}  preempt {result['preemptions']:.0f}",
        flush=True,
    )
