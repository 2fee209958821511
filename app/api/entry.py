"""The ASGI entry point: the admitted API routes (``app.request.routes``) go straight
to the pipeline; everything else goes through FastAPI.

Every ASGI message a route sends passes through the send wrapper of each
layer around it: Starlette's server-error and exception middleware, the
route's own exception wrapper, the request-id middleware. A relayed stream
sends one message per token, so that is four coroutine frames per token for
layers these routes do not use: the request's flight answers its own errors
and sets the request id header. So ``Gateway.__call__`` takes them on the API
port itself (a method other than POST is a 405 here), and hands every other
request (the admin port, health, metrics, models, a stored response, unknown
paths) to FastAPI.

vLLM's routes the gateway does not relay are answered with a 501 that says
why (``NOT_RELAYED``): its realtime transcription is a WebSocket session on a
realtime speech model, audio appended for as long as the session lasts, whose
demand the gateway cannot know when it admits it nor bound as it bounds a
request (a handshake there is denied with the same 501). Uploaded audio is
served (``/v1/audio/transcriptions`` and ``/translations``).
"""

from typing import Any

from fastapi import FastAPI
from starlette.requests import Request
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from app.request.error_responses import error_response
from app.request.errors import MethodNotAllowed, NotServed
from app.request.pipeline import serve_completion
from app.request.routes import ApiRoute, route_at
from app.serve.request_id import HEADER, current_request_id, pick_request_id
from app.serve.services import Services

NOT_RELAYED = {
    "/v1/realtime": "vLLM's realtime transcription (a WebSocket session on a realtime speech"
    " model) is not relayed by the gateway: connect to the engine for it, or upload the"
    " audio to /v1/audio/transcriptions",
}


class Gateway(FastAPI):
    def __init__(self, *, admin_port: int | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._admin_port = admin_port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refused = NOT_RELAYED.get(scope["path"]) if scope["type"] != "lifespan" else None
        if refused is not None:
            response = error_response(NotServed(refused), "openai")
            if scope["type"] == "websocket":
                await WebSocket(scope, receive, send).send_denial_response(response)
            else:
                await response(scope, receive, send)
            return
        if scope["type"] == "http":
            route = route_at(scope["path"])
            if route is not None and not self._on_admin_port(scope):
                scope["app"] = self
                await _serve(route, scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    def _on_admin_port(self, scope: Scope) -> bool:
        server = scope.get("server") or (None, None)
        return self._admin_port is not None and server[1] == self._admin_port


async def _serve(route: ApiRoute, scope: Scope, receive: Receive, send: Send) -> None:
    request_id = pick_request_id(scope)
    scope.setdefault("state", {})["request_id"] = request_id
    token = current_request_id.set(request_id)
    try:
        if scope["method"] != "POST":
            response = error_response(MethodNotAllowed("POST"), route.errors)
            response.headers[HEADER] = request_id
            await response(scope, receive, send)
            return
        request = Request(scope, receive, send)
        services: Services = request.state.services
        await serve_completion(request, route.name, services, send)
    finally:
        current_request_id.reset(token)
