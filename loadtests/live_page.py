"""The gateway's live page (``/live`` on its admin port) open for a whole
load run, and a screenshot of it near the run's end: what a person watching
``make up``'s stack (which has no Grafana) saw.

A real headless chromium (Debian's package, as the tests use it) driven by
Playwright, in a thread of its own so the run's own timing is untouched.
Where either is missing the run goes on without the picture, and says so.
"""

import shutil
import threading
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
# As root chromium needs --no-sandbox; the rest keep it from reaching for
# Google's hosts on a machine whose network is closed.
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class LivePageWatcher(threading.Thread):
    def __init__(self, admin_url: str, at_seconds: float, out: Path) -> None:
        super().__init__(daemon=True)
        self._url = f"{admin_url}/live?every=2&window={int(at_seconds) + 30}"
        self._at = at_seconds
        self._out = out
        self._done = threading.Event()
        self.note = ""

    @staticmethod
    def available() -> str | None:
        """Why no screenshot can be taken here, or None."""
        if shutil.which(CHROMIUM) is None:
            return f"no {CHROMIUM} (Debian: apt-get install chromium)"
        try:
            import playwright  # noqa: F401
        except ImportError:
            return "no playwright in this environment"
        return None

    def stop(self) -> None:
        self._done.set()

    def run(self) -> None:
        from playwright.sync_api import sync_playwright

        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
                page = browser.new_page(viewport={"width": 1280, "height": 760})
                page.goto(self._url)
                self._done.wait(self._at)
                page.screenshot(path=self._out)
                browser.close()
            self.note = f"live page: {self._out.name}"
        except Exception as exc:  # the picture is a bonus; the run is the point
            self.note = f"live page: no screenshot ({exc!r})"
