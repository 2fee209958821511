"""The ASGI entry point: the two completion routes go straight to the
pipeline; everything else goes through FastAPI.

Every ASGI message a route sends passes through the send wrapper of each
layer around it: Starlette's server-error and exception middleware, the
route's own exception wrapper, the request-id middleware. A relayed stream
sends one message per token, so that is four coroutine frames per token for
layers the completion routes do not use: the pipeline maps its own errors
(``app.responses``) and the request id is set here. So ``Gateway.__call__``
takes ``POST /v1/chat/completions`` and ``POST /v1/completions`` on the API
port itself, and hands every other request (other methods, the admin port,
health, metrics, models, unknown paths) to FastAPI, where the same routes
are still declared for everything FastAPI adds around them (405s, the admin
port's 404).
"""

import logging
from typing import Any

from fastapi import FastAPI, Request
from starlette.types import Receive, Scope, Send

from app.errors import InternalError
from app.pipeline import serve_completion
from app.request_id import HEADER, current_request_id, pick_request_id
from app.responses import error_response
from app.services import Services
from app.validation import Route

log = logging.getLogger("gateway")

COMPLETION_ROUTES: dict[str, Route] = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
}


class Gateway(FastAPI):
    def __init__(self, *, admin_port: int | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._admin_port = admin_port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            route = COMPLETION_ROUTES.get(scope["path"])
            if route is not None and not self._on_admin_port(scope):
                scope["app"] = self
                await _serve(route, scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    def _on_admin_port(self, scope: Scope) -> bool:
        server = scope.get("server") or (None, None)
        return self._admin_port is not None and server[1] == self._admin_port


async def _serve(route: Route, scope: Scope, receive: Receive, send: Send) -> None:
    request_id = pick_request_id(scope)
    scope.setdefault("state", {})["request_id"] = request_id
    token = current_request_id.set(request_id)
    try:
        request = Request(scope, receive, send)
        services: Services = request.state.services
        try:
            response = await serve_completion(request, route, services)
        except Exception:  # the pipeline maps its own errors: this is a bug
            log.exception("unhandled error")
            response = error_response(InternalError("internal gateway error"))
        response.headers[HEADER] = request_id
        await response(scope, receive, send)
    finally:
        current_request_id.reset(token)
