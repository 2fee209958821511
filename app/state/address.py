"""Where the shared state's Redis is: one server by its URL, a primary that
Redis Sentinel names and moves on a fail-over, or a Redis Cluster found from
one of its nodes.

Under Sentinel the client asks the sentinels for the primary before each new
connection and drops its connections when the answer changes (redis-py's
``SentinelConnectionPool``); a connection to a primary demoted under it is
dropped on its first read-only error. Between the primary's loss and its
replica's promotion, calls fail as they do with one Redis down: the gateway
runs on its share (``SharedRedis``) and its next heartbeat after the
promotion writes what it holds into the new primary, which replication, being
asynchronous, may have left behind.

In a cluster the client learns which node serves which slot from the node it
is given, follows ``MOVED`` redirections when that changes, and finds a
replica promoted in a failed primary's place the same way; every script it
runs touches the keys of one slot (``app.state.layout``).
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import redis.asyncio as redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.sentinel import Sentinel

from app.settings import Settings, sentinel_nodes


@dataclass(frozen=True)
class SentinelAddress:
    # The sentinels to ask, (host, port) each.
    sentinels: tuple[tuple[str, int], ...]
    # The name they monitor the primary under (``sentinel monitor <name> …``).
    service: str
    # The primary's and replicas' password, and the sentinels' own (each
    # None: none asked for).
    password: str | None = None
    sentinel_password: str | None = None


@dataclass(frozen=True)
class ClusterAddress:
    # One node of the cluster (``redis://[:password@]host:port``); the
    # client discovers the others from it.
    url: str


RedisAddress = str | SentinelAddress | ClusterAddress
# A client for one Redis (or Sentinel's primary), or for a cluster.
Client = redis.Redis | RedisCluster

Close = Callable[[], Awaitable[None]]


def redis_address(settings: Settings) -> RedisAddress | None:
    """Where the state shared with other replicas lives (None: nowhere)."""
    if settings.redis_cluster and settings.redis_url is not None:
        return ClusterAddress(settings.redis_url)
    if settings.redis_sentinels is not None:
        password, sentinel_password = settings.redis_password, settings.redis_sentinel_password
        return SentinelAddress(
            sentinel_nodes(settings.redis_sentinels),
            settings.redis_sentinel_service,
            password=None if password is None else password.get_secret_value(),
            sentinel_password=None
            if sentinel_password is None
            else sentinel_password.get_secret_value(),
        )
    return settings.redis_url


def connect(address: RedisAddress, timeout: float) -> tuple[Client, Close]:
    """A client for ``address`` whose calls give up after ``timeout``, and
    what closes it with everything it opened."""
    if isinstance(address, ClusterAddress):
        cluster = RedisCluster.from_url(
            address.url, socket_timeout=timeout, socket_connect_timeout=timeout
        )
        return cluster, cluster.aclose
    if isinstance(address, str):
        client = redis.Redis.from_url(
            address, socket_timeout=timeout, socket_connect_timeout=timeout
        )
        return client, client.aclose
    # redis-py's Sentinel constructor carries no annotations.
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        list(address.sentinels),
        sentinel_kwargs={
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "password": address.sentinel_password,
        },
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        password=address.password,
    )
    primary = sentinel.master_for(address.service)

    async def close() -> None:
        await primary.aclose()
        for one in sentinel.sentinels:
            await one.aclose()

    return primary, close


def shown(address: RedisAddress) -> str:
    """``address`` for people (/status): no password."""
    if isinstance(address, SentinelAddress):
        nodes = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in address.sentinels)
        return f"sentinel://{nodes}/{address.service}"
    if isinstance(address, ClusterAddress):
        return "cluster+" + shown(address.url)
    parts = urlsplit(address)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"
