"""A real Redis Cluster for the tests: six ``redis-server`` nodes on free
loopback ports, three primaries each with a replica, made one cluster by
``redis-cli --cluster create`` (Debian's redis-tools).

A node is counted failed after ``node_timeout_ms`` without an answer
(Redis's default is 15 s), and its replica then promotes itself. Nothing is
persisted; each node keeps its ``nodes.conf`` in the test's folder.
"""

import shutil
import subprocess
from pathlib import Path

import redis

from app.state.address import ClusterAddress
from deploy.local import free_port_with
from tests.support.redis_server import RedisServer
from tests.support.wait import wait_until

# A node talks to the others on its port + 10,000 (the cluster bus).
BUS_OFFSET = 10_000
# Bounds for states the cluster passes through; each is reached in a few
# seconds on an idle machine.
WAIT = 120.0


class RedisClusterNodes:
    def __init__(self, log_dir: Path, node_timeout_ms: int = 1000) -> None:
        self.nodes: list[RedisServer] = []
        for i in range(6):
            folder = log_dir / f"cluster-node-{i}"
            folder.mkdir(parents=True, exist_ok=True)
            self.nodes.append(
                RedisServer(
                    folder,
                    pick_port=lambda: free_port_with(BUS_OFFSET),
                    extra=[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        str(node_timeout_ms),
                    ],
                )
            )
        self._log_dir = log_dir

    @property
    def url(self) -> str:
        """One node's URL: the client finds the others from it."""
        return self.nodes[0].url

    @property
    def address(self) -> ClusterAddress:
        return ClusterAddress(self.url)

    def settings(self) -> dict[str, object]:
        """The gateway's settings that point it at this cluster."""
        return {"redis_url": self.url, "redis_cluster": True}

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        cli = shutil.which("redis-cli")
        assert cli, "redis-cli is missing: install Debian's redis-server (.ci/run does)"
        create = subprocess.run(
            [
                cli,
                "--cluster",
                "create",
                *(f"127.0.0.1:{n.port}" for n in self.nodes),
                "--cluster-replicas",
                "1",
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=WAIT,
        )
        assert create.returncode == 0, create.stdout + create.stderr
        assert wait_until(self.settled, WAIT, interval=0.1), self.describe()

    def settled(self) -> bool:
        """Every live node sees the cluster whole (all slots served) and
        three primaries each with a replica in sync."""
        live = [n for n in self.nodes if n.process is not None]
        for node in live:
            with self._client(node) as client:
                if _state(client) != "ok":
                    return False
        return len(self.primaries()) == 3 and all(self._synced_replica(p) for p in self.primaries())

    def primaries(self) -> list[RedisServer]:
        """The live nodes serving slots now."""
        out = []
        for node in self.nodes:
            if node.process is None:
                continue
            with self._client(node) as client:
                if client.execute_command("ROLE")[0] == "master":
                    out.append(node)
        return out

    def primary_of(self, key: str) -> RedisServer:
        """The live node serving ``key``'s slot."""
        (node, *_) = self.primaries()
        with self._client(node) as client:
            slot = int(client.execute_command("CLUSTER KEYSLOT", key))
            ranges = client.execute_command("CLUSTER SLOTS")
        for start, end, primary, *_replicas in ranges:
            if start <= slot <= end:
                return self._by_port(int(primary[1]))
        raise AssertionError(f"no primary serves {key}")

    def _synced_replica(self, primary: RedisServer) -> bool:
        with self._client(primary) as client:
            info = client.info("replication")
        replicas = [v for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
        return any(r.get("state") == "online" for r in replicas)

    def _by_port(self, port: int) -> RedisServer:
        (node,) = [n for n in self.nodes if n.port == port]
        return node

    def kill(self, node: RedisServer) -> None:
        """Gone at once, as a host that dies."""
        node.kill()

    def wait_promoted(self) -> None:
        """Return once the cluster serves every slot again, a replica having
        taken the killed primary's place."""

        def whole() -> bool:
            live = [n for n in self.nodes if n.process is not None]
            for node in live:
                with self._client(node) as client:
                    if _state(client) != "ok":
                        return False
            return len(self.primaries()) == 3

        assert wait_until(whole, WAIT, interval=0.1), self.describe()

    def flush(self) -> None:
        """Empty every primary (replicas follow)."""
        for node in self.primaries():
            with self._client(node) as client:
                client.flushall()

    def describe(self) -> str:
        return "\n".join(n.process.log_tail(10) for n in self.nodes if n.process is not None)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    @staticmethod
    def _client(node: RedisServer) -> redis.Redis:
        return redis.Redis(port=node.port, socket_timeout=2, decode_responses=True)


def _state(client: redis.Redis) -> str:
    """``cluster_state`` of ``CLUSTER INFO``: ok while every slot is served."""
    info = client.execute_command("CLUSTER INFO")  # type: ignore[no-untyped-call]
    return str(info["cluster_state"])
