"""A real ``redis-server`` for the tests, on a free port, no persistence."""

import shutil
import signal
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import redis

from app.state.address import RedisAddress
from app.state.redis import SharedRedis
from deploy.local import ManagedProcess, free_port

if TYPE_CHECKING:
    from tests.support.redis_cluster import RedisClusterNodes


class RedisServer:
    def __init__(
        self,
        log_dir: Path,
        replica_of: "RedisServer | None" = None,
        password: str | None = None,
        extra: Sequence[str] = (),
        port: int | None = None,
        pick_port: Callable[[], int] = free_port,
    ) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is missing: install Debian's redis-server (.ci/run does)"
        # A port picked here was free a moment ago, nothing more: another
        # process may take it before the server binds it, and then the server
        # exits while the other answers there. Its first start picks again.
        self._pick = pick_port if port is None else None
        self.port = pick_port() if port is None else port
        self.password = password
        self._binary = binary
        self._replica_of = replica_of
        self._extra = list(extra)
        self._log_dir = log_dir
        self._started = False
        self.process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        auth = "" if self.password is None else f":{self.password}@"
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    @property
    def address(self) -> RedisAddress:
        return self.url

    def settings(self) -> dict[str, object]:
        """The gateway's settings that point it here."""
        return {"redis_url": self.url}

    def start(self) -> None:
        """Start it and return once it answers, on the port it has had (a
        restart), or on another if its first port was taken meanwhile."""
        for _ in range(5):
            if self._serve():
                self._started = True
                return
            log = self.process.log_tail() if self.process is not None else ""
            self.stop()
            if self._pick is None or self._started:
                raise RuntimeError(f"redis-server could not serve port {self.port}:\n{log}")
            self.port = self._pick()
        raise RuntimeError("redis-server found no free port in five picks")

    def _serve(self) -> bool:
        """Whether the server started now answers on its port (not another
        process that took the port first)."""
        process = ManagedProcess(f"redis-{self.port}", self._argv(), {}, self._log_dir)
        self.process = process
        deadline = time.monotonic() + 30
        # Closed on the way out: a client left to the garbage collector
        # leaves its socket to it too (a ResourceWarning, at some later test).
        with redis.Redis.from_url(self.url, socket_timeout=1) as client:
            while process.proc.poll() is None:
                try:
                    info = client.info("server")
                except redis.exceptions.AuthenticationError:
                    return False  # another server: it refused our password
                except redis.exceptions.ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
                    continue
                except redis.exceptions.RedisError:
                    return False  # another server, of another kind
                return int(info["process_id"]) == process.pid
        return False

    def _argv(self) -> list[str]:
        replica_of, password = self._replica_of, self.password
        return [
            self._binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            # A replica's full sync goes through a file even without
            # persistence: in the test's folder, not the checkout.
            "--dir",
            str(self._log_dir),
            *([] if replica_of is None else ["--replicaof", "127.0.0.1", str(replica_of.port)]),
            # A replica authenticates to its primary with the same password.
            *([] if password is None else ["--requirepass", password, "--masterauth", password]),
            *self._extra,
        ]

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    def kill(self) -> None:
        """Gone at once, as a host that dies: no shutdown, nothing saved."""
        if self.process is not None:
            self.process.signal(signal.SIGKILL)
            self.process.stop()
            self.process = None


@asynccontextmanager
async def replicas_of(
    server: "RedisServer | RedisClusterNodes", size: int, lease: float
) -> AsyncIterator[list[SharedRedis]]:
    """``size`` gateway replicas' connections to ``server``, each alive (one
    heartbeat) under ``lease``. A generous timeout: forty holds at once on a
    busy machine take more than a second, and a timed-out call would count
    Redis as down, which only the tests about that want."""
    shared = [SharedRedis(server.address, lease=lease, timeout=10.0) for _ in range(size)]
    for one in shared:
        await one.heartbeat()
    try:
        yield shared
    finally:
        for one in shared:
            await one.aclose()
