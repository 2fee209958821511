"""One measured run, the skeleton every benchmark's runs share: wait for
the engines to idle, read the counters, sample gauges while the load runs,
then read the counters again — and a base for what a benchmark starts."""

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp

from app.observe.promtext import Sample, total
from benchmarks.harness.client import Client, engine_idle
from benchmarks.harness.machine import ForeignCpu
from benchmarks.harness.processes import Processes, Service, model_name


class Sampler:
    """Reads some series of several ``/metrics`` every ``period`` seconds."""

    def __init__(
        self, client: Client, targets: Mapping[str, str], names: Sequence[str], period: float = 1.0
    ) -> None:
        self.client = client
        self.targets = dict(targets)
        self.names = tuple(names)
        self.period = period
        self.rows: list[tuple[float, str, list[Sample]]] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            now = time.perf_counter()
            for target, url in self.targets.items():
                with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                    self.rows.append((now, target, await self.client.metrics(url, self.names)))
            await asyncio.sleep(max(0.0, self.period - (time.perf_counter() - now)))

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def series(
        self,
        target: str,
        name: str,
        labels: dict[str, str] | None = None,
        start: float = float("-inf"),
        end: float = float("inf"),
    ) -> list[float]:
        """The values read from ``target`` between ``start`` and ``end``."""
        return [
            total(s, name, labels) for at, t, s in self.rows if t == target and start <= at <= end
        ]

    def rate(self, target: str, name: str, start: float, end: float) -> float | None:
        """How fast a counter of ``target`` grew per second between its
        first and last sample within ``start``..``end`` (None: fewer than two)."""
        points = [
            (at, total(s, name)) for at, t, s in self.rows if t == target and start <= at <= end
        ]
        if len(points) < 2 or points[-1][0] <= points[0][0]:
            return None
        return (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0])


@dataclass
class Window:
    """What one measured run saw around its load: when the load began
    (``time.perf_counter``) and how long it ran, each target's counters
    before and after, the sampled series, and the cores other engines and
    test runs used meanwhile."""

    started: float = 0.0
    seconds: float = 0.0
    before: dict[str, list[Sample]] = field(default_factory=dict)
    after: dict[str, list[Sample]] = field(default_factory=dict)
    sampler: Sampler | None = None
    others_cores: float = 0.0

    def series(
        self, target: str, name: str, start: float = float("-inf"), end: float = float("inf")
    ) -> list[float]:
        """A sampled series of ``target`` between ``start`` and ``end``."""
        if self.sampler is None:
            return []
        return self.sampler.series(target, name, start=start, end=end)

    def rate(self, target: str, name: str, start: float, end: float) -> float | None:
        """A sampled counter's growth per second between ``start`` and ``end``."""
        if self.sampler is None:
            return None
        return self.sampler.rate(target, name, start, end)

    def delta(
        self, name: str, target: str | None = None, labels: dict[str, str] | None = None
    ) -> float:
        """How much a counter grew on ``target`` (default: summed over all)."""
        targets = list(self.after) if target is None else [target]
        return sum(
            total(self.after[t], name, labels) - total(self.before[t], name, labels)
            for t in targets
        )

    def delta_by(self, name: str, label: str, target: str) -> dict[str, float]:
        """How much a counter grew on ``target``, per value of ``label``."""
        before = by_label(self.before[target], name, label)
        after = by_label(self.after[target], name, label)
        return {key: value - before.get(key, 0.0) for key, value in after.items()}


def by_label(samples: Iterable[Sample], name: str, label: str) -> dict[str, float]:
    """The samples called ``name`` summed per value of ``label``."""
    out: dict[str, float] = {}
    for s in samples:
        if s.name == name:
            key = s.labels.get(label, "")
            out[key] = out.get(key, 0.0) + s.value
    return out


async def _read(
    client: Client, targets: Mapping[str, str], names: Sequence[str]
) -> dict[str, list[Sample]]:
    if not names:
        return {target: [] for target in targets}
    return {target: await client.metrics(url, names) for target, url in targets.items()}


@contextlib.asynccontextmanager
async def measured(
    client: Client,
    targets: Mapping[str, str],
    counters: Sequence[str] = (),
    *,
    idle: Iterable[str] = (),
    sampled: Mapping[str, str] | None = None,
    series: Sequence[str] = (),
    period: float = 1.0,
) -> AsyncIterator[Window]:
    """Measure the load run in the ``async with`` block: wait for the
    engines at ``idle`` to run and wait for nothing, read ``counters`` on
    every target (name → base URL), sample ``series`` on ``sampled`` every
    ``period`` seconds while the block runs, then — the engines idle again —
    read the counters once more."""
    engines = list(idle)
    for url in engines:
        await engine_idle(client, url)
    window = Window(before=await _read(client, targets, counters))
    if sampled:
        window.sampler = Sampler(client, sampled, series, period)
    others = ForeignCpu()
    others.start()
    if window.sampler is not None:
        window.sampler.start()
    window.started = time.perf_counter()
    try:
        yield window
        window.seconds = time.perf_counter() - window.started
    finally:
        if window.sampler is not None:
            await window.sampler.stop()
    window.others_cores = others.stop()
    for url in engines:
        await engine_idle(client, url)
    window.after = await _read(client, targets, counters)


class Bench:
    """What a benchmark starts (its engines here; its gateways are its own)
    and its measured runs, each against every engine it started."""

    def __init__(self, procs: Processes) -> None:
        self.procs = procs
        self.engines: list[Service] = []
        self.model = model_name()

    @property
    def engine(self) -> Service:
        assert self.engines, "start the engines first"
        return self.engines[0]

    def measure(
        self,
        client: Client,
        counters: Sequence[str] = (),
        gateways: Mapping[str, str] | None = None,
        *,
        sampled: Mapping[str, str] | None = None,
        series: Sequence[str] = (),
        period: float = 1.0,
    ) -> contextlib.AbstractAsyncContextManager[Window]:
        """``measured`` with every engine idle before and after, and
        ``counters`` read on every engine (by its name) and on ``gateways``."""
        targets = {e.name: e.url for e in self.engines} | dict(gateways or {})
        return measured(
            client,
            targets,
            counters,
            idle=[e.url for e in self.engines],
            sampled=sampled,
            series=series,
            period=period,
        )
