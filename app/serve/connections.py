"""Bounds on connections, before any request reaches the app.

uvicorn closes idle keep-alive connections, but it gives a connection that
opens and then sends its request head slowly (or never) all the time it
wants, and it accepts as many connections as arrive. So the gateway's HTTP
protocol is uvicorn's own with two additions:

- a request head must be complete within ``head_timeout`` seconds of the
  connection opening (or of its first byte, for later requests on a
  keep-alive connection); otherwise the gateway answers ``408`` and closes
  the connection;
- beyond ``max_connections`` open connections, a new one is closed at once,
  as a full accept queue would refuse it.

A request whose head never arrived never reached a route, so it has no
outcome; both cases are logged. A reverse proxy in front (nginx's
``client_header_timeout``, Envoy's ``request_headers_timeout``) bounds slow
heads before they reach any replica; these bounds protect the gateway
without one.
"""

import asyncio
import json
import logging

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.request.errors import BodyTimeout

log = logging.getLogger("gateway.connections")

_BODY = json.dumps(BodyTimeout("the request head did not arrive in time").body()).encode()
_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: " + str(len(_BODY)).encode() + b"\r\n\r\n" + _BODY
)


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    head_timeout: float = 10.0
    max_connections: int = 4096

    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            log.warning("refused a connection: %d open (the limit)", self.max_connections)
            transport.abort()
            return
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.head_timeout, self._head_too_late)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_late(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        log.warning("closed a connection whose request head took over %gs", self.head_timeout)
        self.transport.write(_TIMEOUT_RESPONSE)
        self.transport.close()


def guarded_protocol(head_timeout: float, max_connections: int) -> type[HttpToolsProtocol]:
    """The protocol class for one server, with its bounds."""
    return type(
        "GatewayHttpProtocol",
        (GuardedHttpToolsProtocol,),
        {"head_timeout": head_timeout, "max_connections": max_connections},
    )
