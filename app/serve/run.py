"""Running the gateway: uvicorn on the API port (and the admin port when
set), with the drain before shutdown (app/serve/server.py)."""

import gc
import logging
import os
import socket

import uvicorn

from app.main import create_app
from app.observe.logs import configure_logging
from app.observe.tracing import start_tracing
from app.serve.connections import guarded_protocol
from app.serve.drain import Drain
from app.serve.server import DrainingServer
from app.settings import Settings, unknown_variables

log = logging.getLogger("gateway")


def run_gateway(settings: Settings) -> None:
    configure_logging(settings.log_level, settings.log_format)
    report_unknown_variables()
    # Before serving, in the process that serves (the SDK's export thread).
    tracer_provider = start_tracing()
    drain = Drain()
    config = uvicorn.Config(
        create_app(settings, drain),
        host=settings.host,
        port=settings.port,
        lifespan="on",
        http=guarded_protocol(settings.head_timeout, settings.max_connections),
        access_log=False,
        log_config=None,
        timeout_graceful_shutdown=max(
            1, int(settings.shutdown_timeout - settings.drain_grace_seconds)
        ),
    )
    sockets = [_listen(settings.host, settings.port, reuse_port=settings.reuse_port)]
    if settings.admin_port is not None:
        # Each process its own: Prometheus scrapes every one.
        sockets.append(_listen(settings.host, settings.admin_port))
    # What the imports and the app made lives as long as the process: out
    # of the collector's way, a full collection under load walks only what
    # came after: a full collection pauses every stream in flight.
    gc.freeze()
    try:
        DrainingServer(config, drain, settings.drain_grace_seconds).run(sockets=sockets)
    finally:
        if tracer_provider is not None:
            # The last requests' spans go out before the process ends.
            tracer_provider.shutdown()


def report_unknown_variables() -> None:
    """A misspelt setting would otherwise be ignored without a word."""
    for name, closest in unknown_variables(os.environ):
        hint = f"; did you mean {closest}?" if closest else ""
        log.warning("%s is not a setting of the gateway and is ignored%s", name, hint)


def _listen(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A listening socket (the API port, and the admin port when set)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock
