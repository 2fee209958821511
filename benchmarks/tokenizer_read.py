"""Where a fresh gateway reads a large model's tokenizer files: the time on
the event loop when an engine names the model, and at the first request of
the model and of two LoRA adapters served from the same directory.

The tokenizer is a synthetic byte-level BPE the size of a current large
model's (``--vocab`` tokens, 128k by default, each with the merge that makes
it), written to a temporary directory: reading it is what
``Tokenizer.from_file`` costs for a ``tokenizer.json`` of that size. The
measured tree (``--gateway-src``) is imported in a process of its own, so an
earlier commit's ``TokenizerFiles`` can be measured beside today's; one that
has no ``prepare`` reads nothing when the engine is found. Reading holds the
GIL throughout, so every millisecond here is one the event loop stands still.

    python -m benchmarks.tokenizer_read --rounds 5
    python -m benchmarks.tokenizer_read --gateway-src reports/wt-4783451
"""

import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.harness import Processes, benchmark_parser, run_benchmark, table

# The child: import ``app`` from the measured tree (PYTHONPATH), time it.
MEASURE = """
import json, sys, time
from pathlib import Path
from app.tokens.local import ModelTokenizer, TokenizerFiles

reads = []
load = ModelTokenizer.load
ModelTokenizer.load = staticmethod(lambda directory: reads.append(1) or load(directory))

rows = []
for _ in range(int(sys.argv[2])):
    files = TokenizerFiles(Path(sys.argv[1]))
    row = []
    for name in (None, "m", "m-lora-1", "m-lora-2"):
        before, started = len(reads), time.perf_counter()
        if name is None:
            # The engine found: a tree without ``prepare`` reads nothing then.
            if hasattr(files, "prepare"):
                files.prepare("m")
        else:
            assert files.for_model(name) is not None
        row.append([time.perf_counter() - started, len(reads) - before])
    rows.append(row)
print(json.dumps(rows))
"""
MOMENTS = ["engine found", "first request: m", "first request: m-lora-1", "first request: m-lora-2"]


def synthetic_tokenizer(directory: Path, vocab: int, seed: int = 0) -> Path:
    """A byte-level BPE ``tokenizer.json`` of ``vocab`` tokens: the 256
    byte symbols, then tokens of up to 12 characters each made by one merge
    of two earlier ones."""
    rng = random.Random(seed)
    symbols = [chr(c) for c in range(33, 127)] + [chr(c) for c in range(161, 323)]
    tokens = {s: i for i, s in enumerate(symbols)}
    order = list(symbols)
    merges: list[str] = []
    while len(tokens) < vocab:
        a, b = rng.choice(order), rng.choice(order)
        if len(a) + len(b) > 12 or a + b in tokens:
            continue
        tokens[a + b] = len(tokens)
        order.append(a + b)
        merges.append(f"{a} {b}")
    byte_level = {"add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    spec: dict[str, Any] = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", **byte_level},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", **byte_level},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": tokens,
            "merges": merges,
        },
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tokenizer.json"
    path.write_text(json.dumps(spec))
    return path


def measure(src: str, directory: Path, rounds: int) -> list[list[list[float]]]:
    """Each round's moments: [seconds on the loop, files read]."""
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(directory), str(rounds)],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    rows: list[list[list[float]]] = json.loads(done.stdout.strip().splitlines()[-1])
    return rows


def render(result: dict[str, Any]) -> str:
    rows = []
    for i, moment in enumerate(MOMENTS):
        ms = sorted(row[i][0] * 1000 for row in result["rounds"])
        reads = sorted(row[i][1] for row in result["rounds"])
        rows.append(
            [
                moment,
                f"{ms[len(ms) // 2]:,.1f} ({ms[0]:,.1f}–{ms[-1]:,.1f})",
                f"{reads[len(reads) // 2]:g}",
            ]
        )
    return (
        f"A synthetic tokenizer.json of {result['vocab']:,} tokens"
        f" ({result['bytes'] / 1e6:.1f} MB), {len(result['rounds'])} fresh reads,"
        f" gateway source {result['gateway_commit']}: ms on the event loop, median"
        " (min–max)\n\n" + table(["when", "ms", "files read"], rows) + "\n"
    )


def main() -> None:
    p = benchmark_parser(__doc__ or "")
    p.add_argument("--vocab", type=int, default=128_000, help="the tokenizer's vocabulary")
    p.add_argument("--rounds", type=int, default=5, help="fresh reads measured")
    args = p.parse_args()

    async def run(procs: Processes, out: Path) -> dict[str, Any]:
        with tempfile.TemporaryDirectory() as scratch:
            path = synthetic_tokenizer(Path(scratch), args.vocab)
            rounds = measure(args.gateway_src, path.parent, args.rounds)
            return {"vocab": args.vocab, "bytes": path.stat().st_size, "rounds": rounds}

    run_benchmark("tokenizer-read", args, run, render)


if __name__ == "__main__":
    main()
