"""A real Redis primary, its replica and a sentinel watching them, on free
loopback ports, for the tests of a fail-over.

One sentinel with a quorum of one: enough to fail over (a production group
runs three or more so that one sentinel's view cannot decide alone; the
gateway's side of a fail-over is the same). The primary is counted down
after 500 ms without an answer (Sentinel's default is 30 s), or, for a test
that needs the gap between the primary's loss and the promotion held open,
never in the test's time: that test promotes with ``SENTINEL FAILOVER``.
(Stopping the sentinel would not hold it: a sentinel that finds its clock
jumped enters its 30 s "tilt" and does nothing.) Nothing is persisted; the
sentinel rewrites its config file, kept in the test's folder.
"""

import shutil
from pathlib import Path

import redis

from app.settings import sentinel_nodes
from deploy.local import ManagedProcess, free_port
from tests.support.redis_server import RedisServer
from tests.support.wait import wait_until

SERVICE = "gateway-state"
# Bounds for states a fail-over passes through; each is reached in about a
# second on an idle machine (a sentinel in tilt waits 30 s).
WAIT = 120.0


class SentinelGroup:
    def __init__(
        self,
        log_dir: Path,
        automatic: bool = True,
        passwords: tuple[str, str] | None = None,
    ) -> None:
        # The data nodes' password and the sentinel's own, if they ask.
        self.password: str | None = passwords[0] if passwords else None
        self.sentinel_password: str | None = passwords[1] if passwords else None
        self._down_after_ms = 500 if automatic else 3_600_000
        self.primary = RedisServer(log_dir, password=self.password)
        self.replica = RedisServer(log_dir, replica_of=self.primary, password=self.password)
        self.port = free_port()
        self.sentinels = f"127.0.0.1:{self.port}"
        self._config = log_dir / f"sentinel-{self.port}.conf"
        self._log_dir = log_dir
        self.process: ManagedProcess | None = None

    def settings(self) -> dict[str, object]:
        """The gateway's settings that point it at this group."""
        settings: dict[str, object] = {
            "redis_sentinels": self.sentinels,
            "redis_sentinel_service": SERVICE,
        }
        if self.password is not None:
            settings["redis_password"] = self.password
        if self.sentinel_password is not None:
            settings["redis_sentinel_password"] = self.sentinel_password
        return settings

    def start(self) -> None:
        self.primary.start()
        self.replica.start()
        assert wait_until(lambda: self._replica_in_sync(), WAIT), "the replica never synced"
        self._config.write_text(
            f"port {self.port}\nbind 127.0.0.1\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary.port} 1\n"
            f"sentinel down-after-milliseconds {SERVICE} {self._down_after_ms}\n"
            f"sentinel failover-timeout {SERVICE} 5000\n"
            + ("" if self.password is None else f"sentinel auth-pass {SERVICE} {self.password}\n")
            + ("" if self.sentinel_password is None else f"requirepass {self.sentinel_password}\n")
        )
        binary = shutil.which("redis-server")
        assert binary, "redis-server is missing: install Debian's redis-server (.ci/run does)"
        argv = [binary, str(self._config), "--sentinel"]
        self.process = ManagedProcess(f"sentinel-{self.port}", argv, {}, self._log_dir)
        # A fail-over needs a replica the sentinel has found (through the
        # primary's INFO): wait for it rather than for a while.
        assert wait_until(self._replica_known, WAIT), self.process.log_tail()

    def fail_over(self) -> None:
        """Kill the primary at once; return once its replica took its place."""
        self.primary.kill()
        self.wait_promoted()

    def promote(self) -> None:
        """Have the sentinel promote the replica now (``SENTINEL FAILOVER``),
        as it would once it counts the primary down; return once promoted."""

        def started() -> bool:
            try:
                with self._sentinel() as sentinel:
                    sentinel.execute_command("SENTINEL FAILOVER", SERVICE)
            except redis.exceptions.ResponseError:  # NOGOODSLAVE until it answers pings again
                return False
            return True

        assert wait_until(started, WAIT, interval=0.5), self._log_tail()
        self.wait_promoted()

    def _log_tail(self) -> str:
        return self.process.log_tail() if self.process else ""

    def wait_promoted(self) -> None:
        """Return once the fail-over has ended: the replica has taken the
        primary's role and the sentinel's record of the service (``SENTINEL
        MASTERS``, which clients read; the address by name changes earlier,
        at the promotion) names it."""

        def promoted() -> bool:
            with self._replica() as node:
                role: str = node.role()[0]
            with self._sentinel() as sentinel:
                record = sentinel.sentinel_masters()[SERVICE]
            return record["port"] == self.replica.port and role == "master"

        assert wait_until(promoted, WAIT), self._log_tail()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None
        self.replica.stop()
        self.primary.stop()

    def _sentinel(self) -> redis.Redis:
        ((host, port),) = sentinel_nodes(self.sentinels)
        return redis.Redis(
            host=host,
            port=port,
            password=self.sentinel_password,
            socket_timeout=1,
            decode_responses=True,
        )

    def _replica(self) -> redis.Redis:
        return redis.Redis(
            port=self.replica.port, password=self.password, socket_timeout=1, decode_responses=True
        )

    def _replica_in_sync(self) -> bool:
        with self._replica() as node:
            link: str = node.info("replication").get("master_link_status", "")
        return link == "up"

    def _replica_known(self) -> bool:
        try:
            with self._sentinel() as sentinel:
                replicas = sentinel.sentinel_slaves(SERVICE)
        except redis.exceptions.RedisError:
            return False
        return any(
            int(r["port"]) == self.replica.port and not r["is_disconnected"] for r in replicas
        )
