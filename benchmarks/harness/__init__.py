"""The one harness of the benchmarks that start what they measure
themselves (``benchmarks.admission``, ``overhead``, ``limits``, ``prefix``)
and of the experiments that measure a running stack:

- ``processes``: engines, gateways and Redis as process groups stopped
  together, each with its log kept;
- ``machine``: CPU time from /proc, how quiet the machine is, what it was
  like before and after;
- ``client``: the lean measuring client and closed-loop users;
- ``measure``: one measured run (engines idle, counters before and after,
  sampled gauges) and the base of a benchmark's processes;
- ``tables``: figures as text, Markdown tables, JSON;
- ``run``: the common options, the quiet-machine wait and the output folder.

A benchmark imports what it uses from here.
"""

from benchmarks.harness.client import CHAT, Call, Client, closed_loop, engine_idle, tokens_within
from benchmarks.harness.machine import (
    ForeignCpu,
    MachineState,
    cpu_seconds,
    machine,
    machine_note,
    machine_state,
    own_cpu,
    tree_cpu,
    tree_kernel_cpu,
)
from benchmarks.harness.measure import Bench, Sampler, Window, by_label, measured
from benchmarks.harness.processes import Processes, Service, access_log, model_name, wait_ready
from benchmarks.harness.run import add_common_args, benchmark_parser, run_benchmark
from benchmarks.harness.tables import median_range, ms, num, q, sections, table, write_json

__all__ = [
    "CHAT",
    "Bench",
    "Call",
    "Client",
    "ForeignCpu",
    "MachineState",
    "Processes",
    "Sampler",
    "Service",
    "Window",
    "access_log",
    "add_common_args",
    "benchmark_parser",
    "by_label",
    "closed_loop",
    "cpu_seconds",
    "engine_idle",
    "machine",
    "machine_note",
    "machine_state",
    "measured",
    "median_range",
    "model_name",
    "ms",
    "num",
    "own_cpu",
    "q",
    "run_benchmark",
    "sections",
    "table",
    "tokens_within",
    "tree_cpu",
    "tree_kernel_cpu",
    "wait_ready",
    "write_json",
]
