"""The admin port's live page (``/live``) in a real browser, in front of the
real engine: it draws the gateway's state and follows it while requests run.

The state is held without a race against generation: the engine is paused
(vLLM's ``/pause``, ``mode=keep``: it keeps its requests, unscheduled, so
the one in flight stays in flight) and the gateway admits one sequence, so
the second request stays in its queue, until the test resumes the engine.
The page polls every half second; each wait below is for what it shows.
"""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from playwright.async_api import Page

from deploy.local import free_port
from tests.support.browser import headless_chromium
from tests.support.engines import MODEL, Engine
from tests.support.gateways import StartGateway

BODY = {"model": MODEL, "max_tokens": 16, "ignore_eos": True, "stream": True}
# Generous: a busy machine's browser, gateway and engine share two cores.
WAIT_MS = 60_000


@contextlib.asynccontextmanager
async def paused(engine: Engine) -> AsyncIterator[None]:
    async with httpx.AsyncClient(base_url=engine.url, timeout=60) as http:
        (await http.post("/pause", params={"mode": "keep"})).raise_for_status()
        try:
            yield
        finally:
            (await http.post("/resume")).raise_for_status()


async def shows(page: Page, **expected: str) -> None:
    """Wait until each element (by id, ``_`` for ``-``) reads as expected."""
    checks = " && ".join(
        f"document.getElementById({key.replace('_', '-')!r})?.textContent === {value!r}"
        for key, value in expected.items()
    )
    await page.wait_for_function(checks, timeout=WAIT_MS)


async def test_the_page_follows_requests_queued_running_and_done(
    idle_engine: Engine, start_gateway: StartGateway, tmp_path: Path
) -> None:
    admin = free_port()
    # One sequence at a time: with the engine paused its
    # slot sits empty, and the lead would admit the queued request.
    gateway = start_gateway(idle_engine.url, admin_port=admin, max_concurrency=1, queue_timeout=120)
    gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)

    async with headless_chromium() as browser, httpx.AsyncClient(timeout=120) as http:
        page = await browser.new_page(viewport={"width": 1280, "height": 760})
        await page.goto(f"http://127.0.0.1:{admin}/live?every=0.5")
        await shows(page, in_flight="0", queue_depth="0")
        engine_row = page.locator(f'tr[data-engine="{idle_engine.url}"]')
        assert "routable" in await engine_row.inner_text()

        requests: list[asyncio.Future[httpx.Response]] = []
        try:
            async with paused(idle_engine):
                for i in range(2):
                    body = {**BODY, "prompt": f"Live {i}"}
                    requests.append(
                        asyncio.ensure_future(http.post(f"{gateway.url}/v1/completions", json=body))
                    )
                await shows(page, in_flight="1", queue_depth="1")
                assert "normal 1" in await page.inner_text("#queue-by-priority")
                await page.screenshot(path=tmp_path / "live.png")
            answers = await asyncio.gather(*requests)
        finally:
            for request in requests:
                request.cancel()
        assert [a.status_code for a in answers] == [200, 200]

        # Done: nothing in flight or queued, the two first tokens (which
        # waited out the pause) in the last 30 s of TTFT, and what the path in
        # front of the engine added to them (the engine timed both).
        await shows(page, in_flight="0", queue_depth="0")
        for tile in ("ttft", "added"):
            await page.wait_for_function(
                f"document.getElementById('{tile}').textContent !== '–'", timeout=WAIT_MS
            )
        assert await page.inner_text("#error") == ""
    assert (tmp_path / "live.png").stat().st_size > 0
