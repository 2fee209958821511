"""The processes a benchmark starts — engines, gateways, Redis — each a
process group with its log kept, all stopped together whatever happens."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import redis

from deploy.local import ROOT, ManagedProcess, free_port, free_port_with
from deploy.stack import KV_EVENTS_OFFSET

# A gateway's settings for engines started with ``kv_events``.
KV_EVENTS = {
    "GATEWAY_KV_EVENTS_ENDPOINT": f"tcp://{{host}}:{{port+{KV_EVENTS_OFFSET}}}",
    "GATEWAY_KV_EVENTS_REPLAY_ENDPOINT": f"tcp://{{host}}:{{port+{KV_EVENTS_OFFSET + 1}}}",
}


def model_name() -> str:
    """The engine's served model name (the launcher's ``ENGINE_MODEL_NAME``)."""
    return os.environ.get("ENGINE_MODEL_NAME") or "tiny"


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


def _raise_stop(sig: int, frame: FrameType | None) -> None:
    raise _Stop(f"signal {sig}")


class Processes:
    """Every process a benchmark starts; all stopped (in reverse order, each
    as a process group) when the ``with`` block ends, whether it ends well,
    fails, or is interrupted by Ctrl-C, SIGTERM or SIGHUP. Each one's output
    goes to ``<logs>/<name>.log``, which stays.

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

    def stop(self, service: Service) -> None:
        """Stop one service now (its process group)."""
        if service.proc in self._procs:
            self._procs.remove(service.proc)
            service.proc.stop()

    def _start(self, name: str, argv: list[str], env: dict[str, str]) -> ManagedProcess:
        proc = ManagedProcess(name, argv, env, self.logs)
        self._procs.append(proc)
        return proc

    def command(self, name: str, argv: list[str], env: dict[str, str]) -> ManagedProcess:
        """Any other process the benchmark runs (stopped with the rest)."""
        return self._start(name, argv, env)

    def engine(
        self,
        name: str,
        *,
        kv_blocks: int | None = None,
        kv_space_gib: int = 1,
        max_num_seqs: int | None = None,
        cpus: str | None = None,
        kv_events: bool = False,
        env: dict[str, str] | None = None,
    ) -> Service:
        """An engine (``deploy/engine/run-cpu.sh``: CPU build, tiny model,
        pinned to ``cpus``, default ``ENGINE_CPUS`` or the launcher's all
        cores but the last); ``kv_events``: publishing its KV cache events
        beside its port, as ``make up``'s (``KV_EVENTS``); ``env``: more of
        the launcher's settings (``ENGINE_LORA_MODULES``). Call
        ``wait_ready`` before using it."""
        port = free_port_with(KV_EVENTS_OFFSET, KV_EVENTS_OFFSET + 1) if kv_events else free_port()
        env = {
            **(env or {}),
            "ENGINE_PORT": str(port),
            # Set even when unset here: `make` exports the local stack's 24.
            "ENGINE_KV_BLOCKS": "" if kv_blocks is None else str(kv_blocks),
            "ENGINE_MAX_NUM_SEQS": "" if max_num_seqs is None else str(max_num_seqs),
            "VLLM_CPU_KVCACHE_SPACE": str(kv_space_gib),
        }
        if cpus is not None:
            env["ENGINE_CPUS"] = cpus
        if kv_events:
            env["ENGINE_KV_EVENTS_PORT"] = str(port + KV_EVENTS_OFFSET)
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

    def router(self, name: str, worker_urls: Iterable[str], args: Iterable[str] = ()) -> Service:
        """vLLM's own router (``vllm-router``, Rust; the ``bench`` extra) in
        front of ``worker_urls``; call ``wait_ready`` before using it."""
        binary = Path(sys.executable).parent / "vllm-router"
        if not binary.exists():
            raise RuntimeError(
                f"{binary} is missing: install the benchmarks' extra"
                " (`.venv/bin/pip install -r requirements/bench.lock`; `make bench-overhead` does)"
            )
        port, metrics_port = free_port(), free_port()
        argv = [str(binary), "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--worker-urls", *worker_urls]
        # Its metrics listen on a port of their own (29000 unless told), and
        # it checks a worker's start-up every 30 s unless told.
        argv += ["--prometheus-port", str(metrics_port), "--worker-startup-check-interval", "1"]
        argv += ["--log-level", "warning", *args]
        proc = self._start(name, argv, {})
        return Service(name, f"http://127.0.0.1:{port}", proc)

    def nginx(self, name: str, upstream: str) -> Service:
        """nginx in front of ``upstream`` as the floor of what a relay costs:
        one worker, upstream connections kept alive, nothing buffered (each
        event passed on as it arrives); ``nginx-light`` from the system's
        packages (``make bench-overhead`` installs it). Call ``wait_ready``."""
        binary = shutil.which("nginx") or "/usr/sbin/nginx"
        if not Path(binary).exists():
            raise RuntimeError("nginx is missing: apt-get install nginx-light")
        port = free_port()
        home = self.logs / name
        home.mkdir(parents=True, exist_ok=True)
        conf = home / "nginx.conf"
        conf.write_text(nginx_conf(port, upstream.removeprefix("http://"), home))
        argv = [binary, "-p", str(home), "-c", str(conf), "-e", "stderr"]
        proc = self._start(name, argv, {})
        return Service(name, f"http://127.0.0.1:{port}", proc)

    def bare_relay(self, name: str, upstream: str) -> Service:
        """The floor of a relay on the gateway's stack
        (``benchmarks/overhead/bare_relay.py``: uvicorn and aiohttp, nothing
        else) in front of ``upstream``; call ``wait_ready``."""
        port = free_port()
        argv = [sys.executable, "-m", "benchmarks.overhead.bare_relay"]
        env = {"BARE_RELAY_UPSTREAM": upstream, "BARE_RELAY_PORT": str(port)}
        proc = self._start(name, argv, env)
        return Service(name, f"http://127.0.0.1:{port}", proc)

    def trace_backend(self, name: str = "traces") -> Service:
        """The local trace backend (``deploy/traces/run.sh``; ``make
        trace-backend`` installs it); its URL takes OTLP/HTTP at
        ``/v1/traces``. Call ``wait_ready`` before using it."""
        if not (ROOT / ".venv-traces" / "bin" / "phoenix").exists():
            raise RuntimeError("the trace backend is missing: make trace-backend")
        port, grpc_port = free_port(), free_port()
        env = {
            "TRACES_PORT": str(port),
            "TRACES_GRPC_PORT": str(grpc_port),
            "TRACES_DIR": str(self.logs / name),
        }
        proc = self._start(name, ["deploy/traces/run.sh"], env)
        return Service(name, f"http://127.0.0.1:{port}", proc, ready="/healthz")

    def redis(self, name: str = "redis") -> str:
        """A Redis server (``redis-server``) with no persistence; its URL."""
        port = free_port()
        argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        argv += ["--appendonly", "no"]
        _wait_pong(self._start(name, argv, {}), port)
        return f"redis://127.0.0.1:{port}/0"

    def redis_cluster(self, name: str = "redis-cluster", node_timeout_ms: int = 15000) -> str:
        """A Redis Cluster of six ``redis-server`` nodes, no persistence:
        three primaries, each with a replica (as one runs it: what feeding
        its replica costs a primary is part of what it spends), made one by
        ``redis-cli --cluster create``; one node's URL, from which a client
        finds the others. Each node keeps its ``nodes.conf`` in
        ``<logs>/<name>-<i>/``. ``node_timeout_ms``: Redis's default, so
        that a node slowed by a busy machine is not failed over mid-run."""
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError("redis-cli is missing: apt-get install redis-tools")
        ports = []
        for i in range(6):
            port = free_port_with(10000)  # and its cluster bus port
            home = self.logs / f"{name}-{i}"
            home.mkdir(parents=True, exist_ok=True)
            argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
            argv += ["--appendonly", "no", "--dir", str(home), "--cluster-enabled", "yes"]
            argv += ["--cluster-config-file", "nodes.conf"]
            argv += ["--cluster-node-timeout", str(node_timeout_ms)]
            _wait_pong(self._start(f"{name}-{i}", argv, {}), port)
            ports.append(port)
        create = [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports)]
        create += ["--cluster-replicas", "1", "--cluster-yes"]
        done = subprocess.run(create, capture_output=True, text=True, timeout=120, check=False)
        (self.logs / f"{name}-create.log").write_text(done.stdout + done.stderr)
        if done.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed:\n{done.stdout}{done.stderr}")
        deadline = time.monotonic() + 120
        while not _cluster_settled(ports):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Redis Cluster on {ports} did not settle")
            time.sleep(0.2)
        return f"redis://127.0.0.1:{ports[0]}"


def _wait_pong(proc: ManagedProcess, port: int) -> None:
    """Return once the ``redis-server`` on ``port`` answers PING."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.proc.poll() is not None:
            raise RuntimeError(f"redis-server exited:\n{proc.log_tail()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"redis-server on {port} not answering")


def _cluster_settled(ports: list[int]) -> bool:
    """Every node sees every slot served (``cluster_state:ok``), and three
    primaries each have a replica in sync: measuring earlier would count
    the cluster's own settling."""
    primaries = 0
    for port in ports:
        with redis.Redis(port=port, socket_timeout=2, decode_responses=True) as client:
            if client.execute_command("CLUSTER INFO")["cluster_state"] != "ok":
                return False
            info = client.info("replication")
        if info["role"] == "master":
            replicas = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
            if not any(r.get("state") == "online" for r in replicas):
                return False
            primaries += 1
    return primaries == 3


def wait_ready(services: Iterable[Service], timeout: float = 900) -> None:
    """Wait for engines (``/health``) and gateways (``/health/ready``)."""
    for svc in services:
        svc.proc.wait_http(f"{svc.url}{svc.ready}", timeout=timeout)


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


def nginx_conf(port: int, upstream: str, home: Path) -> str:
    """A reverse proxy as operators write one for SSE: HTTP/1.1 to the
    upstream with idle connections kept, no response buffering, no access
    log (the gateway's is its own cost; nginx's would be too, but it is the
    floor asked for)."""
    user = "user root root;\n" if os.geteuid() == 0 else ""
    return f"""{user}daemon off;
worker_processes 1;
pid {home}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {home}/body;
    proxy_temp_path {home}/proxy;
    upstream engine {{ server {upstream}; keepalive 256; }}
    server {{
        listen 127.0.0.1:{port};
        client_max_body_size 16m;
        location / {{
            proxy_pass http://engine;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 600s;
        }}
    }}
}}
"""
