"""What each listener serves when ``GATEWAY_ADMIN_PORT`` is set: the API on
the main port, ``/metrics``, ``/status``, ``/live`` and ``/adapters/*`` only on
the admin port, health on both. One process and one app listen on both ports;
the port a request came in on decides. Behind a platform, publish the main
port and keep the admin port on the internal network (Prometheus scrapes it
there)."""

from starlette.types import ASGIApp, Receive, Scope, Send

from app.request.error_responses import error_response
from app.request.errors import NotFound

ADMIN_PATHS = frozenset({"/metrics", "/status", "/live", "/adapters/load", "/adapters/unload"})


class PortRouter:
    def __init__(self, app: ASGIApp, admin_port: int) -> None:
        self.app = app
        self.admin_port = admin_port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._served(scope):
            await error_response(NotFound("not served on this port"))(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _served(self, scope: Scope) -> bool:
        path: str = scope["path"]
        if path.startswith("/health/"):
            return True
        server = scope.get("server") or (None, None)
        on_admin = server[1] == self.admin_port
        return on_admin == (path in ADMIN_PATHS)
