"""Which engines there are.

``GATEWAY_UPSTREAM_URLS`` lists them, comma-separated; or names one DNS name
with the ``dns+`` prefix (``dns+http://vllm-engines:8000``), re-resolved every
``GATEWAY_UPSTREAM_DNS_INTERVAL`` seconds to all its addresses — a
Kubernetes headless Service answers with one address per ready engine pod.
``GATEWAY_UPSTREAM_URL`` still names a single engine.
"""

import asyncio
import logging
import socket
from urllib.parse import urlsplit

log = logging.getLogger("gateway.engine")

DNS_PREFIX = "dns+"


def engine_urls(urls: str | None, url: str) -> list[str]:
    """The configured list, before any DNS name is resolved."""
    listed = [u.strip().rstrip("/") for u in (urls or "").split(",") if u.strip()]
    return listed or [url.rstrip("/")]


def is_dns(urls: list[str]) -> bool:
    return len(urls) == 1 and urls[0].startswith(DNS_PREFIX)


# The name exists with no address, or not at all: a headless Service with
# no ready engine answers so (a pool scaled to zero), not a failed lookup.
_NO_ADDRESS = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}


async def resolve(url: str) -> list[str] | None:
    """All addresses a ``dns+scheme://name:port`` URL's name has now, as
    engine URLs (sorted, so every replica lists them alike); [] when the
    name has none, None when the lookup failed."""
    parts = urlsplit(url.removeprefix(DNS_PREFIX))
    if parts.hostname is None:
        raise ValueError(f"no host name in {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        if exc.errno in _NO_ADDRESS:
            return []
        log.warning("cannot resolve %s: %s", parts.hostname, exc)
        return None
    except OSError as exc:
        log.warning("cannot resolve %s: %s", parts.hostname, exc)
        return None
    hosts = sorted({str(info[4][0]) for info in infos})
    return [f"{parts.scheme}://{_host(h)}:{port}" for h in hosts]


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address
