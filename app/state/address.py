"""Where the shared state's Redis is: one server by its URL, or a primary
that Redis Sentinel names and moves on a fail-over.

Under Sentinel the client asks the sentinels for the primary before each new
connection and drops its connections when the answer changes (redis-py's
``SentinelConnectionPool``); a connection to a primary demoted under it is
dropped on its first read-only error. Between the primary's loss and its
replica's promotion, calls fail as they do with one Redis down: the gateway
runs on its share (``SharedRedis``) and its next heartbeat after the
promotion writes what it holds into the new primary, which replication, being
asynchronous, may have left behind.
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import redis.asyncio as redis
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


RedisAddress = str | SentinelAddress

Close = Callable[[], Awaitable[None]]


def redis_address(settings: Settings) -> RedisAddress | None:
    """Where the state shared with other replicas lives (None: nowhere)."""
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


def connect(address: RedisAddress, timeout: float) -> tuple[redis.Redis, Close]:
    """A client for ``address`` whose calls give up after ``timeout``, and
    what closes it with everything it opened."""
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
    parts = urlsplit(address)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"
