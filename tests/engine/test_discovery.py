"""Which engines there are: the configured list, and a ``dns+`` URL's name
resolved to engine URLs. Against a real DNS server whose answer changes:
tests/e2e/test_dns_discovery.py."""

import asyncio
import socket

import pytest

from app.engine.discovery import engine_urls, is_dns, resolve
from tests.support.asgi import in_process_gateway
from tests.support.scripted_engine import ScriptedEngine
from tests.support.wait import wait_for


def test_a_list_is_split_trimmed_and_falls_back_to_the_single_url() -> None:
    assert engine_urls(" http://a:1/, http://b:2 ,,", "http://x:9") == ["http://a:1", "http://b:2"]
    assert engine_urls(None, "http://x:9/") == ["http://x:9"]
    assert engine_urls(" , ", "http://x:9") == ["http://x:9"]


def test_only_a_single_dns_entry_is_discovered() -> None:
    assert is_dns(["dns+http://engines:8000"])
    assert not is_dns(["http://engines:8000"])
    assert not is_dns(["dns+http://a:8000", "dns+http://b:8000"])


async def test_an_address_resolves_to_an_engine_url_with_the_port_and_scheme() -> None:
    assert await resolve("dns+http://127.0.0.2:8000") == ["http://127.0.0.2:8000"]
    assert await resolve("dns+https://127.0.0.2") == ["https://127.0.0.2:443"]
    assert await resolve("dns+http://127.0.0.2") == ["http://127.0.0.2:80"]
    assert await resolve("dns+http://[::1]:8000") == ["http://[::1]:8000"]


async def test_a_url_without_a_host_name_is_refused() -> None:
    with pytest.raises(ValueError, match="no host name"):
        await resolve("dns+http://:8000")


@pytest.mark.parametrize(("errno", "found"), [(socket.EAI_NONAME, []), (socket.EAI_AGAIN, None)])
async def test_a_name_with_no_address_is_no_engine_and_a_failed_lookup_is_not_known(
    monkeypatch: pytest.MonkeyPatch, errno: int, found: list[str] | None
) -> None:
    async def getaddrinfo(*args: object, **kwargs: object) -> None:
        raise socket.gaierror(errno, "lookup")

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", getaddrinfo)
    assert await resolve("dns+http://engines:8000") == found


@pytest.mark.parametrize(("cold", "kept"), [("tiny", False), (None, True)])
async def test_a_pool_scaled_to_zero_forgets_its_engines_only_with_cold_models(
    monkeypatch: pytest.MonkeyPatch, cold: str | None, kept: bool
) -> None:
    """A headless Service with no ready engine answers with no address: a
    pool that scales to zero has none then; any other keeps the engines it
    knew (else all of them down would read as none there)."""
    engine = ScriptedEngine()
    discovered = [engine]

    async def addresses(url: str) -> list[str]:
        return [e.url for e in discovered]

    monkeypatch.setattr("app.engine.pool.resolve", addresses)
    async with in_process_gateway(
        engine,
        upstream_urls="dns+http://engines:8000",
        upstream_dns_interval=0.05,
        cold_models=cold,
    ) as gateway:
        pool = gateway.services.engines
        discovered.clear()
        # Two rounds of discovery with the empty answer, at least.
        rounds = pool.resolved + 2
        assert await wait_for(lambda: pool.resolved >= rounds, timeout=30)
        assert (engine.url in pool.monitors) is kept
