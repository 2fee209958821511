"""One line of a batch through the same path as any request: identify (as
the batch's owner, in its lowest class), validate and count, charge its
key, admit, call the engine, record one outcome. In process: an ASGI
request made here, its answer collected."""

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.types import Message

from app.keys.file import KeyEntry
from app.keys.identify import IDENTIFIED
from app.request.identity import Identity, Priority
from app.request.pipeline import serve_completion
from app.request.routes import route_at
from app.serve.services import Services

# The class a batch's lines run in: the class table's lowest row.
BATCH_CLASS: Priority = "low"


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return {"error": {"message": self.body.decode(errors="replace")}}


async def call_line(
    services: Services,
    path: str,
    body: bytes,
    tenant: str,
    key: KeyEntry | None,
    request_id: str,
) -> Answer:
    route = route_at(path)
    assert route is not None, path
    identity = Identity(tenant, BATCH_CLASS, key_id=None if key is None else key.id)
    scope: dict[str, Any] = {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"content-type", b"application/json")],
        "http_version": "1.1",
        "scheme": "http",
        "server": None,
        "client": None,
        "state": {"request_id": request_id, "services": services},
        IDENTIFIED: (identity, key),
    }
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            # No client to leave: the line runs until it ends (or the
            # gateway stops, which cancels it and leaves it to be run again).
            await asyncio.Event().wait()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    status, headers, parts = 0, {}, []

    async def send(message: Message) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status = message["status"]
            headers = {k.decode().lower(): v.decode() for k, v in message.get("headers", [])}
        elif message["type"] == "http.response.body":
            parts.append(message.get("body", b""))

    await serve_completion(Request(scope, receive), route.name, services, send)
    return Answer(status, headers, b"".join(parts))
