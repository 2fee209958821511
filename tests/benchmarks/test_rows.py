"""The overhead benchmark's rows (``benchmarks.overhead.rows``): what a
relay's CPU comes to per 1,000 tokens, and the kernel's part of it. No engine."""

import subprocess
import sys

from benchmarks.harness import Call, Window, tree_cpu, tree_kernel_cpu
from benchmarks.overhead.rows import Reading, Row, aggregate, summarise
from benchmarks.overhead.targets import CpuSnapshot


def streamed(started: float, tokens: int) -> Call:
    call = Call(status=200, started=started, finished=started + 1.0, first_token=started)
    call.completion_tokens, call.events = tokens, tokens
    return call


def test_the_relays_cpu_and_its_kernel_part_are_read_over_the_window() -> None:
    row = Row("2", 2, True)
    # 2,000 tokens inside the window [0, 1]: 0.1 s of the relay's CPU, 0.04 s of it the kernel's.
    reading = Reading(
        start=0.0,
        before=CpuSnapshot(proxy=5.0, engine_api=1.0, client=1.0, proxy_kernel=2.0),
        end=1.0,
        after=CpuSnapshot(proxy=5.1, engine_api=1.2, client=1.1, proxy_kernel=2.04),
    )
    calls = [streamed(0.0, 1000), streamed(0.0, 1000)]
    run = summarise("unpinned", row, "router", 0, calls, Window(), reading)
    assert run.proxy_cpu_s is not None
    assert run.proxy_kernel_cpu_s is not None
    assert round(run.proxy_kernel_cpu_s, 6) == 0.04
    [agg] = aggregate([run], [row], ["router"])
    assert round(agg["proxy_cpu_per_1k"]["median"], 6) == 0.05
    assert round(agg["proxy_kernel_cpu_per_1k"]["median"], 6) == 0.02


def test_direct_has_no_relay_and_so_no_kernel_part() -> None:
    row = Row("2", 2, True)
    snap = CpuSnapshot(proxy=None, engine_api=1.0, client=1.0)
    run = summarise(
        "unpinned", row, "direct", 0, [streamed(0.0, 10)], Window(), Reading(0.0, snap, 1.0, snap)
    )
    assert run.proxy_cpu_s is None
    assert run.proxy_kernel_cpu_s is None


def test_a_targets_residual_is_read_against_directs() -> None:
    """Each request's TTFT less the engine's own time; a target's residuals
    pooled over its rounds, and what they add to direct's at p50 and p99."""
    row = Row("2", 2, True)
    snap = CpuSnapshot(proxy=None, engine_api=1.0, client=1.0)
    reading = Reading(0.0, snap, 1.0, snap)

    def timed(ttft: float, engine: float) -> Call:
        call = streamed(0.0, 10)
        call.first_token, call.engine_time = ttft, engine
        return call

    direct = summarise("unpinned", row, "direct", 0, [timed(0.05, 0.04)] * 10, Window(), reading)
    through = summarise("unpinned", row, "gateway", 0, [timed(0.06, 0.04)] * 10, Window(), reading)
    untimed = summarise("unpinned", row, "nginx", 0, [streamed(0.0, 10)], Window(), reading)
    assert through.residuals == [0.06 - 0.04] * 10
    agg = {
        a["target"]: a
        for a in aggregate([direct, through, untimed], [row], ["direct", "gateway", "nginx"])
    }
    assert round(agg["gateway"]["residual_p50"], 6) == 0.02
    over = agg["gateway"]["residual_over_direct"]
    assert (round(over["p50"], 6), round(over["p99"], 6)) == (0.01, 0.01)
    assert agg["nginx"]["residual_over_direct"] is None


# A child that spends half a second of its own CPU on arithmetic, says so,
# then half a second on syscalls (a pipe written and read a byte at a time).
_CHILD = """
import os, sys, time
def spend(step):
    start = time.process_time()
    while time.process_time() - start < 0.5:
        for _ in range(1000):
            step()
spend(lambda: sum(range(50)))
print("arithmetic", flush=True)
sys.stdin.readline()
r, w = os.pipe()
spend(lambda: (os.write(w, b"x"), os.read(r, 1)))
print("syscalls", flush=True)
sys.stdin.readline()
"""


def test_the_kernel_part_is_the_system_time_of_the_tree() -> None:
    argv = [sys.executable, "-c", _CHILD]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as child:
        assert child.stdin is not None
        assert child.stdout is not None
        try:
            assert child.stdout.readline().strip() == "arithmetic"
            kernel, total = tree_kernel_cpu(child.pid), tree_cpu(child.pid)
            # Its own arithmetic: the kernel's part is what starting Python took.
            assert total >= 0.5
            assert kernel <= 0.5 * total
            child.stdin.write("\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "syscalls"
            # Half a second of syscalls: most of it is the kernel's.
            assert tree_kernel_cpu(child.pid) - kernel >= 0.15
            assert tree_kernel_cpu(child.pid) <= tree_cpu(child.pid)
            child.stdin.write("\n")
            child.stdin.flush()
            assert child.wait(timeout=60) == 0
        finally:
            if child.poll() is None:
                child.kill()
