"""``/live`` on the admin port: a page to watch the gateway without Grafana.

``make up``'s stack has no Grafana, so during a load run a newcomer would
have only logs. The page is one static file (``live.html``, no script from
elsewhere: an admin network is often closed) that reads ``/status`` and
``/metrics`` every few seconds and keeps the last minutes in the browser;
the gateway stores nothing for it and does no work when nobody watches.
"""

from functools import cache
from importlib.resources import files

from fastapi import APIRouter
from starlette.responses import HTMLResponse, Response

router = APIRouter()


@cache
def _page() -> str:
    return files("app.api").joinpath("live.html").read_text(encoding="utf-8")


@router.get("/live")
async def live() -> Response:
    return HTMLResponse(_page(), headers={"cache-control": "no-cache"})
