"""The profile: py-spy on a gateway under streaming load; its raw stacks
are kept and summarised (the share of wall time it was busy, the frames
most often on the stack and at its top, self time by package)."""

import argparse
import asyncio
import collections
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.harness import table
from benchmarks.overhead.rows import Row, measured_run
from benchmarks.overhead.targets import OverheadBench

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
        gateway = bench.proxies[target]
        path = out / f"profile-{target}-{bench.layout}.txt"
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
        seconds = args.profile_seconds + 4
        run = await measured_run(bench, row, target, -1, seconds, args.max_tokens)
        if await spying != 0 or not path.exists():
            continue
        summary = summarise_profile(path.read_text(), args.profile_seconds, args.profile_rate, src)
        summary["tokens_per_s_while_profiled"] = round(run.tokens_per_s)
        profiles[target] = summary
    return profiles
