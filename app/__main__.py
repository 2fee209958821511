"""``python -m app``: run the gateway with the settings from the environment."""

import socket

import uvicorn

from app.connections import guarded_protocol
from app.drain import Drain
from app.logs import configure_logging
from app.main import create_app
from app.server import DrainingServer
from app.settings import get_settings


def main() -> None:
    settings = get_settings()
    configure_logging(settings.log_level)
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
    sockets = [_listen(settings.host, settings.port)]
    if settings.admin_port is not None:
        sockets.append(_listen(settings.host, settings.admin_port))
    DrainingServer(config, drain, settings.drain_grace_seconds).run(sockets=sockets)


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket (the API port, and the admin port when set)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


if __name__ == "__main__":
    main()
