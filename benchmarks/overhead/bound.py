"""How many sequences a small KV cache runs at once without a preemption: the
bound the overload part's small-cache cells are read against.

A sequence of a prompt of ``p`` tokens holds ``ceil((p + g + 1) / block)``
blocks while the engine writes its output token ``g + 1``, and frees them all
when it ends at ``max_tokens``; every running sequence writes one token a
step. Two schedules of the same requests:

- **together** — sequences that start together end together, and all hold
  their last, largest count at once: ``usable // blocks(p + max_tokens)``.
  The gateway admits this way (every request reserved at its worst case);
- **staggered** — starts spread evenly over a sequence's life, so at any
  step some hold one block, some two, some three: the most sequences whose
  sum never exceeds the cache at any step.

No schedule without a preemption runs more than ``usable / mean_held``
sequences on average (each holds ``mean_held`` blocks over its life, and the
cache holds ``usable``); the staggered one comes within one of that, so it
is the bound a gateway is measured against.

Run: ``python -m benchmarks.overhead.bound --kv-blocks 48`` (the prompts
``make bench-overhead`` sends, counted with the model's tokenizer files).
"""

import argparse
import asyncio
import math
import statistics

from app.tokens.local import ModelTokenizer
from deploy.local import ROOT
from loadtests.prompts import PromptFactory


def held(prompt: int, written: int, block: int) -> int:
    """Blocks a sequence holds while it writes output token ``written + 1``."""
    return math.ceil((prompt + written + 1) / block)


def together(usable: int, block: int, prompt: int, max_tokens: int) -> int:
    """Sequences that start together and end together, without a preemption."""
    return usable // held(prompt, max_tokens - 1, block)


def staggered(usable: int, block: int, prompt: int, max_tokens: int) -> int:
    """The most sequences with evenly spread starts whose blocks never
    exceed ``usable`` at any step (each step of a period checked)."""
    best = 0
    life = [held(prompt, g, block) for g in range(max_tokens)]
    for count in range(1, usable + 1):
        ages = [k * max_tokens // count for k in range(count)]
        peak = max(sum(life[(age + t) % max_tokens] for age in ages) for t in range(max_tokens))
        if peak > usable:
            break
        best = count
    return best


def future_peak(ages: list[int], block: int, prompt: int, max_tokens: int) -> int:
    """The most blocks sequences of these ages will hold at once from now
    on, each writing a token a step and ending at ``max_tokens``. The sum
    only rises where one of them takes a block, so it is read there."""
    points = {0} | {
        s
        for age in ages
        for s in range(max_tokens - age)
        if held(prompt, age + s, block) > held(prompt, age + s - 1, block)
    }
    return max(
        sum(held(prompt, age + s, block) for age in ages if age + s < max_tokens) for s in points
    )


def admitted_paced(
    usable: int, block: int, prompt: int, max_tokens: int, gap: int, steps: int = 3000
) -> float:
    """Sequences running on average under an admission that never lets the
    cache's future peak exceed ``usable`` and, with ``gap`` > 0, admits one
    at a time, ``gap`` tokens after the one before (``gap`` 0: as many as the
    peak allows, at once), a queue that never empties behind it. A
    simulation, step by step."""
    ages: list[int] = []
    since, running = gap, 0
    for _ in range(steps):
        while (gap == 0 or since >= gap) and future_peak(
            [*ages, 0], block, prompt, max_tokens
        ) <= usable:
            ages.append(0)
            since = 0
            if gap:
                break
        running += len(ages)
        ages = [age + 1 for age in ages if age + 1 < max_tokens]
        since += 1
    return running / steps


def mean_held(block: int, prompt: int, max_tokens: int) -> float:
    """A sequence's blocks averaged over its life."""
    return statistics.fmean(held(prompt, g, block) for g in range(max_tokens))


async def _prompt_lengths(count: int, seed: int) -> list[int]:
    tokenizer = ModelTokenizer.load(ROOT / ".models" / "tiny")
    prompts = PromptFactory(seed=seed)
    return [len(await tokenizer.chat({"messages": prompts.chat()})) for _ in range(count)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kv-blocks", type=int, default=48)
    # vLLM's block pool keeps one block as its null block (app.admission.budget).
    p.add_argument("--reserved-blocks", type=int, default=1)
    p.add_argument("--block-size", type=int, default=128, help="vLLM's CPU default")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--prompts", type=int, default=500)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    usable = args.kv_blocks - args.reserved_blocks
    lengths = asyncio.run(_prompt_lengths(args.prompts, args.seed))
    median = int(statistics.median(lengths))
    print(
        f"{usable} usable blocks of {args.block_size}, max_tokens {args.max_tokens}, prompts"
        f" {min(lengths)}-{max(lengths)} tokens (median {median}, {len(lengths)} counted)"
    )
    for prompt in sorted({min(lengths), median, max(lengths)}):
        bounds = (
            together(usable, args.block_size, prompt, args.max_tokens),
            staggered(usable, args.block_size, prompt, args.max_tokens),
            mean_held(args.block_size, prompt, args.max_tokens),
        )
        print(
            f"  prompt {prompt}: together {bounds[0]}, staggered {bounds[1]}, at most"
            f" {usable / bounds[2]:.1f} on average (a sequence holds {bounds[2]:.2f} blocks"
            " over its life)"
        )
    gap = round(args.max_tokens * mean_held(args.block_size, median, args.max_tokens) / usable)
    paced = [admitted_paced(usable, args.block_size, median, args.max_tokens, g) for g in (0, gap)]
    print(
        f"  prompt {median}, admitted while the cache's future peak fits: {paced[0]:.1f}"
        f" running on average at once, {paced[1]:.1f} one at a time every {gap} tokens"
        " (simulated)"
    )


if __name__ == "__main__":
    main()
