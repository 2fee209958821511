"""``/live`` (``app.api.live``): the watch page, in-process — served on the
admin port only, self-contained, reading what the admin port serves. That
it draws and updates in a real browser: tests/e2e/test_live_page.py."""

import re

from tests.support.asgi import in_process_gateway

ADMIN = 9100


async def test_the_page_is_served_on_the_admin_port_only() -> None:
    async with in_process_gateway(admin_port=ADMIN) as gateway:
        page = await gateway.request("/live", b"", method="GET", port=ADMIN).done()
        assert page.status == 200
        assert page.headers["content-type"].startswith("text/html")
        assert (await gateway.request("/live", b"", method="GET", port=8000).done()).status == 404
    # No admin port: nor /status, which the page reads.
    async with in_process_gateway() as gateway:
        assert (await gateway.request("/live", b"", method="GET", port=8000).done()).status == 404


async def test_the_page_loads_nothing_from_elsewhere_and_reads_the_admin_port() -> None:
    async with in_process_gateway(admin_port=ADMIN) as gateway:
        html = (await gateway.request("/live", b"", method="GET", port=ADMIN).done()).body.decode()
    # An admin network is often closed: no script, style or font from a host.
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    assert 'fetch("/status"' in html
    assert 'fetch("/metrics"' in html
