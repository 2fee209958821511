"""Request ids: taken from ``X-Request-Id`` or made up, returned on every
response, passed to the engine, and present in every log line."""

import logging
import re
import uuid
from contextvars import ContextVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = "x-request-id"
_VALID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")

current_request_id: ContextVar[str] = ContextVar("request_id", default="-")


def pick_request_id(scope: Scope) -> str:
    """The client's ``X-Request-Id`` when it is a sane token, else a new one."""
    for name, value in scope.get("headers", ()):
        if name == HEADER.encode():
            candidate: str = value.decode("latin-1")
            if _VALID.fullmatch(candidate):
                return candidate
            break
    return uuid.uuid4().hex


class RequestIdMiddleware:
    """Pure ASGI: no body buffering, so streams pass through untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = pick_request_id(scope)
        scope.setdefault("state", {})["request_id"] = request_id
        token = current_request_id.set(request_id)
        raw = (HEADER.encode(), request_id.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), raw]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            current_request_id.reset(token)


class RequestIdLogFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = current_request_id.get()
        return True
