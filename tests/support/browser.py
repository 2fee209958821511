"""A real headless browser for the tests: Debian's chromium (``.ci/run``
installs it), driven through Playwright, which is told where it is rather
than downloading a browser of its own."""

import contextlib
from collections.abc import AsyncIterator

from playwright.async_api import Browser, async_playwright

# The browser and its flags, as the load runs' screenshots use them.
from loadtests.live_page import ARGS, CHROMIUM


@contextlib.asynccontextmanager
async def headless_chromium() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            await browser.close()
