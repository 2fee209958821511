"""Which engines there are: the configured list, and a ``dns+`` URL's name
resolved to engine URLs. Against a real DNS server whose answer changes:
tests/e2e/test_dns_discovery.py."""

import pytest

from app.engine.discovery import engine_urls, is_dns, resolve


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
