"""Where an engine behind the gateway ran short of its sequence cap, read
from the gateway's own request log (one JSON line per request, as every
overload cell keeps it under ``logs/``).

Each served stream is placed in time from its record: admitted at
``arrival_ts + queue_s``, running from its first token (``ttft_s``) to its end
(``total_s``), as the gateway saw them. From those, at every ``step``:
how many ran against the cap, and so the sequence-seconds the engine went
without (a fresh gateway's first seconds, before ``settle``, left out as the
overload part leaves them out). Under overload, requests admitted together
end together; the **first turnover** — the first batch's end, and its
successors' start — is read apart: how long before the batch's end its
successors were admitted (handed its places), how long after it their first
tokens came, and how much of the shortfall falls within it.

Run: ``python -m benchmarks.overhead.turnover LOG [LOG ...] --cap 128`` (a log
may be gzipped, as the ones in the history under ``docs/overhead/`` are).
"""

import argparse
import gzip
import json
import statistics
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Stream:
    admitted: float
    first_token: float
    ended: float


def streams(lines: list[str]) -> list[Stream]:
    """The served streams of a request log, in seconds from its first arrival."""
    records = []
    for line in lines:
        record = json.loads(line) if '"outcome"' in line else None
        if record and record.get("status") == 200 and record.get("ttft_s") is not None:
            records.append(record)
    if not records:
        return []
    start = min(r["arrival_ts"] for r in records)
    return [
        Stream(
            r["arrival_ts"] - start + r["queue_s"],
            r["arrival_ts"] - start + r["ttft_s"],
            r["arrival_ts"] - start + r["total_s"],
        )
        for r in records
    ]


def running(all_streams: list[Stream], t: float) -> int:
    return sum(1 for s in all_streams if s.first_token <= t < s.ended)


def short(all_streams: list[Stream], cap: int, start: float, end: float, step: float) -> float:
    """Sequence-seconds below ``cap`` between ``start`` and ``end``."""
    missing, t = 0.0, start
    while t < end:
        missing += max(0, cap - running(all_streams, t)) * step
        t += step
    return missing


def first_turnover(
    all_streams: list[Stream], cap: int, *, batch_window: float = 1.0, step: float = 0.05
) -> dict[str, float]:
    """The first batch (admitted within ``batch_window`` of the start) and
    the ``cap`` streams admitted after it: their places handed on ahead of the
    batch's median end, their first tokens after it (median and 90th
    percentile), and the shortfall from a second before that end to three
    after."""
    batch = [s for s in all_streams if s.admitted < batch_window]
    later = sorted((s for s in all_streams if s.admitted >= batch_window), key=lambda s: s.admitted)
    successors = later[: len(batch)]
    if not batch or not successors:
        return {}
    end = statistics.median(s.ended for s in batch)
    starts = sorted(s.first_token - end for s in successors)
    return {
        "batch": len(batch),
        "batch_end": end,
        "handed_on_ahead": end - statistics.median(s.admitted for s in successors),
        "successors_start_after": statistics.median(starts),
        "successors_start_after_p90": starts[int(0.9 * (len(starts) - 1))],
        "short_sequence_seconds": short(all_streams, cap, end - 1.0, end + 3.0, step),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("logs", nargs="+", type=Path)
    p.add_argument("--cap", type=int, default=128, help="the engine's --max-num-seqs")
    p.add_argument("--settle", type=float, default=5.0)
    p.add_argument("--seconds", type=float, default=20.0, help="the overload part's length")
    args = p.parse_args()
    for log in args.logs:
        raw = gzip.decompress(log.read_bytes()) if log.suffix == ".gz" else log.read_bytes()
        found = streams(raw.decode().splitlines())
        total = short(found, args.cap, args.settle, args.seconds, 0.05)
        turn = first_turnover(found, args.cap)
        window = args.seconds - args.settle
        print(
            f"{log}: {len(found)} streams; short of {args.cap} by {total:.0f} sequence-seconds"
            f" from {args.settle:g} to {args.seconds:g} s ({total / window:.1f} on average)"
        )
        if turn:
            print(
                f"  first turnover: {turn['batch']:.0f} streams ending at {turn['batch_end']:.2f} s"
                f" (median); their places handed on {turn['handed_on_ahead']:.2f} s ahead;"
                f" successors' first tokens {turn['successors_start_after']:+.2f} s after"
                f" (p90 {turn['successors_start_after_p90']:+.2f}); short by"
                f" {turn['short_sequence_seconds']:.0f} sequence-seconds within it"
            )


if __name__ == "__main__":
    main()
