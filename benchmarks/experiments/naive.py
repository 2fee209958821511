"""The course's Run A: the naive loop, one ``model.generate()`` per prompt.

    .venv-engine/bin/python -m benchmarks.experiments.naive --model .models/tiny

Runs in the engine's environment (it needs torch and transformers, which the
gateway's environment does not have) and prints one JSON line: output
tokens, seconds, tokens/s. Greedy, ``min_new_tokens`` = ``max_new_tokens`` so
every answer has the same length as the engine's ``ignore_eos`` runs. The
batching experiment starts it pinned to the engine's cores so both get the
same CPUs.
"""

import argparse
import importlib
import json
import sys
import time
from typing import Any


def _prompts(count: int) -> list[str]:
    # The same text as benchmarks.experiments.burst.course_prompts; not
    # imported, so this script needs nothing from the gateway's environment.
    return [f"Write one sentence about the number {i}." for i in range(count)]


def run(model_dir: str, count: int, max_tokens: int, dtype_name: str) -> dict[str, Any]:
    # Imported by name: these live in the engine's environment only, where
    # the gateway's type checker does not look.
    torch: Any = importlib.import_module("torch")
    transformers: Any = importlib.import_module("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=getattr(torch, dtype_name)
    )
    model.eval()
    prompts = _prompts(count)
    with torch.inference_mode():
        warm = tokenizer("Warm up.", return_tensors="pt")
        model.generate(**warm, max_new_tokens=8, do_sample=False)
        started = time.perf_counter()
        total = 0
        for prompt in prompts:
            inputs = tokenizer(prompt, return_tensors="pt")
            out = model.generate(
                **inputs, max_new_tokens=max_tokens, min_new_tokens=max_tokens, do_sample=False
            )
            total += int(out.shape[1] - inputs["input_ids"].shape[1])
        seconds = time.perf_counter() - started
    return {
        "prompts": count,
        "output_tokens": total,
        "seconds": seconds,
        "tokens_per_s": total / seconds,
        "dtype": dtype_name,
        "threads": int(torch.get_num_threads()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    result = run(args.model, args.prompts, args.max_tokens, args.dtype)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
