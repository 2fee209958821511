"""Shared parts of the benchmarks that start what they measure themselves:
engines, gateways and Redis as process groups stopped together; a lean
measuring client; CPU time from /proc; how quiet the machine is; metric
sampling; tables and the output folder.

The client is aiohttp (cheaper per chunk than httpx) and cuts events with
``loadtests.meter.StreamMeter``, which parses JSON only for the first token
and the usage chunk: on two cores the client shares a core with the gateway,
so what the client costs is taken from what the gateway can show.
"""

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import aiohttp

from app.promtext import Sample, parse, total
from deploy.local import ROOT, ManagedProcess, free_port
from loadtests.meter import StreamMeter
from loadtests.phases import quantile

CHAT = "/v1/chat/completions"
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def model_name() -> str:
    """The engine's served model name (the launcher's ``ENGINE_MODEL_NAME``)."""
    return os.environ.get("ENGINE_MODEL_NAME") or "tiny"


# --- processes ----------------------------------------------------------------


@dataclass
class Service:
    name: str
    url: str
    proc: ManagedProcess
    ready: str = "/health"

    @property
    def pid(self) -> int:
        return self.proc.pid


class _Stop(KeyboardInterrupt):
    """SIGTERM or SIGHUP: unwind like Ctrl-C, so every process is stopped."""


class Processes:
    """Every process a benchmark starts; all stopped (in reverse order, each
    as a process group) when the ``with`` block ends, whether it ends well,
    fails, or is interrupted by Ctrl-C, SIGTERM or SIGHUP.

    ``GATEWAY_*`` variables of the calling shell are dropped from this
    process's environment first: each gateway gets exactly the settings the
    benchmark names (a keys file left set in the shell would change what is
    measured)."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        logs.mkdir(parents=True, exist_ok=True)
        self._procs: list[ManagedProcess] = []
        self._handlers: dict[int, Any] = {}
        self.dropped = sorted(k for k in os.environ if k.startswith("GATEWAY_"))
        for name in self.dropped:
            del os.environ[name]

    def __enter__(self) -> "Processes":
        for sig in (signal.SIGTERM, signal.SIGHUP):
            self._handlers[sig] = signal.signal(sig, _raise_stop)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_all()
        for sig, handler in self._handlers.items():
            signal.signal(sig, handler)

    def stop_all(self) -> None:
        while self._procs:
            proc = self._procs.pop()
            try:
                proc.stop()
            except Exception as exc:  # keep stopping the others
                print(f"stopping {proc.name}: {exc!r}", file=sys.stderr)

    def stop(self, service: "Service") -> None:
        """Stop one service now (its process group)."""
        if service.proc in self._procs:
            self._procs.remove(service.proc)
            service.proc.stop()

    def _start(self, name: str, argv: list[str], env: dict[str, str]) -> ManagedProcess:
        proc = ManagedProcess(name, argv, env, self.logs)
        self._procs.append(proc)
        return proc

    def engine(
        self,
        name: str,
        *,
        kv_blocks: int | None = None,
        kv_space_gib: int = 1,
        max_num_seqs: int | None = None,
    ) -> Service:
        """An engine (``deploy/engine/run-cpu.sh``: CPU build, tiny model,
        pinned to ``ENGINE_CPUS``); call ``wait_ready`` before using it."""
        port = free_port()
        env = {
            "ENGINE_PORT": str(port),
            # Set even when unset here: `make` exports the local stack's 24.
            "ENGINE_KV_BLOCKS": "" if kv_blocks is None else str(kv_blocks),
            "ENGINE_MAX_NUM_SEQS": "" if max_num_seqs is None else str(max_num_seqs),
            "VLLM_CPU_KVCACHE_SPACE": str(kv_space_gib),
        }
        proc = self._start(name, ["deploy/engine/run-cpu.sh"], env)
        return Service(name, f"http://127.0.0.1:{port}", proc)

    def gateway(self, name: str, env: dict[str, str], src: Path | None = None) -> Service:
        """A gateway (``python -m app``) run from the source tree ``src``
        (default: this repository), with ``env`` as its only ``GATEWAY_*``
        settings; call ``wait_ready`` before using it."""
        port = free_port()
        argv = [sys.executable, "-m", "app"]
        if src is not None and src.resolve() != ROOT:
            # `python -m` puts the working directory first on the path, so
            # the package imported is the one in `src`.
            argv = ["sh", "-c", 'cd "$0" && exec "$1" -m app', str(src.resolve()), sys.executable]
        full = {"GATEWAY_HOST": "127.0.0.1", "GATEWAY_PORT": str(port), **env}
        proc = self._start(name, argv, full)
        return Service(name, f"http://127.0.0.1:{port}", proc, ready="/health/ready")

    def redis(self, name: str = "redis") -> str:
        """A Redis server (``redis-server``) with no persistence; its URL."""
        port = free_port()
        argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        argv += ["--appendonly", "no"]
        proc = self._start(name, argv, {})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited:\n{proc.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return f"redis://127.0.0.1:{port}/0"
            except OSError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"redis-server on {port} not answering")


def wait_ready(services: Iterable[Service], timeout: float = 900) -> None:
    """Wait for engines (``/health``) and gateways (``/health/ready``)."""
    for svc in services:
        svc.proc.wait_http(f"{svc.url}{svc.ready}", timeout=timeout)


def _raise_stop(sig: int, frame: FrameType | None) -> None:
    raise _Stop(f"signal {sig}")


# --- CPU time from /proc ------------------------------------------------------


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (field 3 on)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def _parents() -> dict[int, int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None:
                parents[int(entry)] = int(fields[1])
    return parents


def tree(pid: int, parents: dict[int, int] | None = None) -> set[int]:
    """``pid`` and every process descended from it."""
    parents = _parents() if parents is None else parents
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    found, todo = {pid}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def cpu_seconds(pids: Iterable[int]) -> dict[int, float]:
    """User + system CPU seconds of each process (all its threads)."""
    out: dict[int, float] = {}
    for pid in pids:
        fields = _stat(pid)
        if fields is not None:
            out[pid] = (int(fields[11]) + int(fields[12])) / _CLK_TCK
    return out


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid``'s process tree (live processes)."""
    return sum(cpu_seconds(tree(pid)).values())


def own_cpu() -> float:
    """CPU seconds of this process (the benchmark's client)."""
    t = os.times()
    return t.user + t.system


# --- how quiet the machine is --------------------------------------------------

OTHERS = "vllm.entrypoints|pytest"


def foreign() -> dict[int, str]:
    """Engines and test runs that are not this benchmark's (``pgrep -af``)."""
    try:
        out = subprocess.run(
            ["pgrep", "-af", OTHERS], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    mine = tree(os.getpid())
    found: dict[int, str] = {}
    for line in out.splitlines():
        pid, _, command = line.partition(" ")
        if pid.isdigit() and int(pid) not in mine:
            found[int(pid)] = command[:160]
    return found


class ForeignCpu:
    """CPU that other engines and test runs (their whole process trees) use
    while a measurement runs, in cores."""

    def __init__(self) -> None:
        self.commands: dict[int, str] = {}
        self._start: dict[int, float] = {}
        self._t0 = 0.0

    def _snapshot(self) -> dict[int, float]:
        self.commands |= foreign()
        parents = _parents()
        pids: set[int] = set()
        for pid in self.commands:
            if pid in parents:
                pids |= tree(pid, parents)
        return cpu_seconds(pids)

    def start(self) -> None:
        self.commands = {}
        self._start = self._snapshot()
        self._t0 = time.monotonic()

    def stop(self) -> float:
        now = self._snapshot()
        used = sum(cpu - self._start.get(pid, 0.0) for pid, cpu in now.items())
        return max(0.0, used) / max(1e-9, time.monotonic() - self._t0)


@dataclass
class Quiet:
    """How quiet the machine was before a benchmark began."""

    waited_s: float
    others: list[str]
    others_cores: float
    loadavg: str


def wait_for_quiet(max_wait_s: float, poll_s: float = 60.0, probe_s: float = 10.0) -> Quiet:
    """Wait (polling every ``poll_s``, at most ``max_wait_s``) until no test
    run is going and other engines are idle (their trees use under 5% of a
    core over ``probe_s``); then go on either way and say how it was."""
    started = time.monotonic()
    while True:
        meter = ForeignCpu()
        meter.start()
        if not meter.commands:
            return Quiet(round(time.monotonic() - started), [], 0.0, _loadavg())
        time.sleep(probe_s)
        cores = meter.stop()
        busy = cores > 0.05 or any("pytest" in c for c in meter.commands.values())
        others = sorted(set(meter.commands.values()))
        waited = time.monotonic() - started
        if not busy or waited + poll_s > max_wait_s:
            if busy:
                print(f"still busy after {waited / 60:.0f} min; going on", file=sys.stderr)
            return Quiet(round(waited), others, round(cores, 3), _loadavg())
        print(
            f"waiting for a quiet machine: {len(others)} other engine/test process(es)"
            f" using {cores:.2f} cores",
            file=sys.stderr,
        )
        time.sleep(poll_s)


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


# --- the client -----------------------------------------------------------------


@dataclass
class Call:
    """One request as the client saw it (times from ``time.perf_counter``)."""

    status: int
    started: float
    finished: float = 0.0
    first_token: float | None = None
    completion_tokens: int = 0
    prompt_tokens: int | None = None
    gaps: list[float] = field(default_factory=list)
    retry_after: float | None = None
    request_id: str = ""
    user: int = 0
    label: str = ""
    streamed: bool = True

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.started


class Client:
    """A lean HTTP client for many concurrent streams (one aiohttp session,
    no connection limit)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> "Client":
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_read=600),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "use the client in `async with`"
        return self._session

    async def stream(
        self, body: dict[str, Any], headers: dict[str, str] | None = None, path: str = CHAT
    ) -> Call:
        """A streaming completion; asks for usage (tokens are counted from
        it, not from chunks)."""
        payload = {**body, "stream": True, "stream_options": {"include_usage": True}}
        call = Call(status=0, started=time.perf_counter())
        hdrs = _with_id(call, headers)
        try:
            async with self.session.post(self.base_url + path, json=payload, headers=hdrs) as resp:
                call.status = resp.status
                if resp.status != 200:
                    await resp.read()
                    call.retry_after = _retry_after(resp.headers.get("retry-after"))
                    call.finished = time.perf_counter()
                    return call
                meter = StreamMeter(started=call.started)
                async for data in resp.content.iter_any():
                    meter.feed(data, time.perf_counter())
        except (TimeoutError, aiohttp.ClientError):
            call.status = -1
            call.finished = time.perf_counter()
            return call
        call.finished = time.perf_counter()
        call.first_token = meter.first_token
        call.completion_tokens = meter.completion_tokens or 0
        call.gaps = meter.gaps
        if meter.completion_tokens is None:
            call.status = -2  # the stream ended without its usage chunk
        return call

    async def complete(
        self, body: dict[str, Any], headers: dict[str, str] | None = None, path: str = CHAT
    ) -> Call:
        """A non-streaming completion."""
        call = Call(status=0, started=time.perf_counter(), streamed=False)
        hdrs = _with_id(call, headers)
        try:
            async with self.session.post(
                self.base_url + path, json={**body, "stream": False}, headers=hdrs
            ) as resp:
                call.status = resp.status
                raw = await resp.read()
                call.finished = time.perf_counter()
                if resp.status != 200:
                    call.retry_after = _retry_after(resp.headers.get("retry-after"))
                    return call
        except (TimeoutError, aiohttp.ClientError):
            call.status = -1
            call.finished = time.perf_counter()
            return call
        usage = json.loads(raw).get("usage") or {}
        call.completion_tokens = int(usage.get("completion_tokens") or 0)
        call.prompt_tokens = usage.get("prompt_tokens")
        call.first_token = call.finished
        return call

    async def metrics(self, base_url: str | None = None, names: Iterable[str] = ()) -> list[Sample]:
        """The samples of ``/metrics`` (only the series in ``names`` when given)."""
        url = (base_url or self.base_url).rstrip("/") + "/metrics"
        async with self.session.get(url) as resp:
            text = await resp.text()
        return parse(text, tuple(names) or None)


def _with_id(call: Call, headers: dict[str, str] | None) -> dict[str, str]:
    call.request_id = uuid.uuid4().hex
    return {"X-Request-Id": call.request_id, **(headers or {})}


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


async def closed_loop(
    users: int,
    seconds: float,
    call: Callable[[int], Awaitable[Call]],
    *,
    retry_after: bool = True,
) -> list[Call]:
    """``users`` closed-loop users for ``seconds``: each sends its next
    request when the previous one ended (after ``Retry-After`` when refused).
    Requests still running at the end are waited for."""
    until = time.perf_counter() + seconds
    calls: list[Call] = []

    async def user(i: int) -> None:
        while time.perf_counter() < until:
            result = await call(i)
            result.user = i
            calls.append(result)
            if result.status != 200:
                pause = (result.retry_after or 1.0) if retry_after else 0.05
                await asyncio.sleep(max(0.0, min(pause, until - time.perf_counter())))

    await asyncio.gather(*(user(i) for i in range(users)))
    return calls


def tokens_within(calls: Iterable[Call], start: float, end: float) -> float:
    """Completion tokens generated between ``start`` and ``end``: each
    request's ``usage`` spread evenly from its first token (a non-streaming
    request: from its start) to its end."""
    tokens = 0.0
    for c in calls:
        if c.status != 200 or not c.completion_tokens:
            continue
        begin = c.first_token if c.first_token is not None and c.streamed else c.started
        span = c.finished - begin
        if span <= 0:
            tokens += c.completion_tokens if start <= begin <= end else 0
            continue
        overlap = min(c.finished, end) - max(begin, start)
        tokens += c.completion_tokens * max(0.0, overlap) / span
    return tokens


# --- sampling metrics --------------------------------------------------------------


class Sampler:
    """Reads some series of several ``/metrics`` every ``period`` seconds."""

    def __init__(
        self, client: Client, targets: dict[str, str], names: Sequence[str], period: float = 1.0
    ) -> None:
        self.client = client
        self.targets = targets
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

    def series(self, target: str, name: str, labels: dict[str, str] | None = None) -> list[float]:
        return [total(s, name, labels) for _, t, s in self.rows if t == target]


async def engine_idle(client: Client, engine_url: str, timeout: float = 120) -> None:
    """Wait until the engine runs and waits for nothing."""
    deadline = time.monotonic() + timeout
    names = ("vllm:num_requests_running", "vllm:num_requests_waiting")
    while time.monotonic() < deadline:
        samples = await client.metrics(engine_url, names)
        if all(total(samples, n) == 0 for n in names):
            return
        await asyncio.sleep(0.2)


# --- figures and output --------------------------------------------------------------


def q(values: Sequence[float], p: float) -> float | None:
    return quantile(values, p)


def ms(v: float | None, digits: int = 1) -> str:
    return "-" if v is None else f"{v * 1000:.{digits}f}"


def num(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def out_dir(name: str, given: str) -> Path:
    """Where a benchmark writes its JSON, tables and logs: ``given``, or
    ``reports/<name>-<UTC time>``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    # Absolute: a gateway run from another source tree has its own working directory.
    path = (Path(given) if given else ROOT / "reports" / f"{name}-{stamp}").resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def source_commit(src: str) -> str:
    """The commit a gateway source tree is at (and ``+changes`` when its
    ``app/`` differs from it)."""
    try:
        head = subprocess.run(
            ["git", "-C", src, "log", "-1", "--format=%h %s"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()[:72]
        dirty = subprocess.run(
            ["git", "-C", src, "status", "--porcelain", "--", "app"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (head or "?") + (" +uncommitted changes in app/" if dirty else "")


def add_common_args(parser: Any) -> None:
    """The options every benchmark takes: which gateway, how long to wait
    for a quiet machine, where to write."""
    parser.add_argument(
        "--gateway-src",
        default=str(ROOT),
        help="the gateway's source tree (default: this repository; e.g. a git worktree)",
    )
    parser.add_argument("--quiet-wait", type=float, default=40.0, help="minutes, at most")
    parser.add_argument("--out", default="", help="folder for result.json, tables, logs")


def run_benchmark(
    name: str,
    args: Any,
    run: Callable[[Processes, Path], Coroutine[Any, Any, dict[str, Any]]],
    render: Callable[[dict[str, Any]], str],
) -> None:
    """Wait for a quiet machine, run ``run`` with its processes (all stopped
    at the end, whatever happens), then write ``result.json`` and
    ``tables.md`` (what ``render`` makes of the result) and print the tables."""
    out = out_dir(name, args.out)
    quiet = wait_for_quiet(args.quiet_wait * 60)
    result: dict[str, Any] = {
        "args": vars(args),
        "machine": machine(),
        "quiet": asdict(quiet),
        "gateway_src": args.gateway_src,
        "gateway_commit": source_commit(args.gateway_src),
    }
    with Processes(out / "logs") as procs:
        result |= asyncio.run(run(procs, out))
    result["machine_after"] = machine()
    write_json(out / "result.json", result)
    text = render(result)
    (out / "tables.md").write_text(text)
    print("\n" + text)
    print(f"written to {out}")


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")


def machine() -> dict[str, Any]:
    """The machine and the conditions, for the JSON."""
    return {
        "cpus": os.cpu_count(),
        "loadavg": _loadavg(),
        "engine_cpus": os.environ.get("ENGINE_CPUS", "all but the last core (launcher default)"),
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def access_log(service: Service) -> list[dict[str, Any]]:
    """A gateway's access log: the JSON lines (one per request) of its output."""
    records = []
    for line in service.proc.log_text().splitlines():
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "request_id" in record:
            records.append(record)
    return records
