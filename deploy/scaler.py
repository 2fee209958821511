"""A local scaler for one engine, on the contract KEDA keeps in Kubernetes
(deploy/k8s/components/scale-from-zero): the engine is started when the
gateways hold a request for it (``gateway_requests_held`` above 0) and
stopped once nothing ran, waited or was held at any gateway for ``--idle``
seconds. The gateways never start processes; this does, beside them.

    python -m deploy.scaler --metrics http://127.0.0.1:9100 --idle 300 \\
        -- deploy/engine/run-cpu.sh

``make up ENGINE_SCALE_FROM_ZERO=300`` runs one per engine (deploy/stack.py).
The engine runs in a process group of its own and is stopped with it (vLLM's
engine core included): SIGTERM, then SIGKILL after ``--stop-timeout``. What
it does goes to stdout, one line an event, with the seconds since it started
the engine where that is what an operator asks.
"""

import argparse
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass

import httpx

from deploy.local import scrape, value

log = logging.getLogger("scaler")

# A request running, waiting or held at a gateway: the engine is in use.
BUSY = ("gateway_requests_in_flight", "gateway_queue_depth", "gateway_requests_held")


@dataclass
class Demand:
    held: float
    busy: float


def read_demand(gateways: Sequence[str]) -> Demand | None:
    """What the gateways report now (None: none answered; nothing is decided
    on no news)."""
    held = busy = 0.0
    answered = False
    for url in gateways:
        try:
            samples = scrape(url)
        except httpx.HTTPError:
            continue
        answered = True
        held += value(samples, "gateway_requests_held")
        busy += sum(value(samples, name) for name in BUSY)
    return Demand(held, busy) if answered else None


class Scaler:
    def __init__(
        self,
        command: Sequence[str],
        idle: float,
        stop_timeout: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.command = list(command)
        self.idle = idle
        self.stop_timeout = stop_timeout
        self.clock = clock
        self.engine: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.active_at = 0.0

    def step(self, demand: Demand | None) -> None:
        """One look at the gateways: start, keep or stop the engine."""
        now = self.clock()
        if self.engine is not None and self.engine.poll() is not None:
            log.warning("engine exited by itself (status %s)", self.engine.returncode)
            self.engine = None
        if demand is None:
            return
        if demand.busy > 0:
            self.active_at = now
        if self.engine is None and demand.held > 0:
            self.start(now, demand.held)
        elif self.engine is not None and now - max(self.active_at, self.started_at) >= self.idle:
            self.stop(f"idle for {self.idle:g}s")

    def start(self, now: float, held: float) -> None:
        log.info("engine started: %d request(s) held at the gateways", held)
        self.engine = subprocess.Popen(self.command, start_new_session=True)
        self.started_at = self.active_at = now

    def stop(self, why: str) -> None:
        engine = self.engine
        if engine is None:
            return
        log.info("engine stopped: %s (ran %.0fs)", why, self.clock() - self.started_at)
        with suppress(ProcessLookupError):
            os.killpg(engine.pid, signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            engine.wait(timeout=self.stop_timeout)
        # Whatever of its group outlived it (or the engine itself, late).
        with suppress(ProcessLookupError):
            os.killpg(engine.pid, signal.SIGKILL)
        engine.wait(timeout=10)
        self.engine = None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.scaler", description=__doc__)
    parser.add_argument(
        "--metrics", action="append", required=True, help="a gateway's admin URL (repeat)"
    )
    parser.add_argument("--idle", type=float, default=300.0, help="seconds unused before stop")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between looks")
    parser.add_argument("--stop-timeout", type=float, default=30.0)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the engine's command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the engine's command after --")
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s scaler %(message)s", stream=sys.stdout
    )
    scaler = Scaler(command, args.idle, args.stop_timeout)

    def stop(signum: int, frame: object) -> None:
        scaler.stop("the scaler was stopped")
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("watching %s; the engine starts on the first held request", ", ".join(args.metrics))
    while True:
        scaler.step(read_demand(args.metrics))
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
