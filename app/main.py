"""The app factory."""

import asyncio
import logging
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from app.api import (
    adapters,
    batches,
    completions,
    files,
    health,
    live,
    status,
    stored_responses,
    tokens,
)
from app.api.entry import Gateway
from app.api.ports import PortRouter
from app.batch.service import build_batches
from app.request.error_responses import error_response
from app.request.errors import FrameworkError, InternalError, InvalidRequest
from app.serve.drain import Drain
from app.serve.request_id import RequestIdMiddleware
from app.serve.services import build_services
from app.settings import Settings, get_settings
from app.tokens.counter import counting_note

log = logging.getLogger("gateway")


def create_app(
    settings: Settings | None = None,
    drain: Drain | None = None,
) -> FastAPI:
    """Build the gateway. ``drain`` is shared with the server runner that
    handles SIGTERM."""
    settings = settings or get_settings()
    drain = drain or Drain()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[dict[str, Any]]:
        services = build_services(settings, drain)
        await services.engines.start()
        if services.shared is not None:
            await services.shared.heartbeat()
        tasks = [asyncio.create_task(run(), name=run.__qualname__) for run in services.background]
        batch_api = build_batches(services)
        tasks.append(asyncio.create_task(batch_api.runner.run(), name="batch-runner"))
        if services.keys is not None:
            keys = services.keys
            tasks.append(asyncio.create_task(keys.run(), name="keys-watcher"))
            _on_sighup(keys.reload)
        else:
            log.warning(
                "no GATEWAY_KEYS_FILE: requests are not authenticated and tenants come"
                " from X-Tenant-Id"
            )
        note = counting_note(settings)
        if note is not None:
            log.info(note)
        try:
            yield {"services": services, "batches": batch_api}
        finally:
            if services.keys is not None:
                _on_sighup(None)
            for task in tasks:
                task.cancel()
            for task in tasks:
                with suppress(asyncio.CancelledError):
                    await task
            batch_api.state.close()
            await services.engine_client.aclose()
            if services.shared is not None:
                await services.shared.aclose()

    app = Gateway(
        admin_port=settings.admin_port,
        title="vllm-gateway",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.add_middleware(RequestIdMiddleware)
    if settings.admin_port is not None:
        app.add_middleware(PortRouter, admin_port=settings.admin_port)
    app.include_router(completions.router)
    app.include_router(tokens.router)
    app.include_router(stored_responses.router)
    app.include_router(files.router)
    app.include_router(batches.router)
    app.include_router(health.router)
    if settings.admin_port is not None:
        # It names tenants and engines: never on the public port.
        app.include_router(status.router)
        # The page that reads /status and /metrics: where /status is.
        app.include_router(live.router)
        # It changes what the engines serve: the operator's alone.
        app.include_router(adapters.router)
    _install_error_handlers(app)
    return app


def _on_sighup(handler: Callable[[], object] | None) -> None:
    """Reload the keys on SIGHUP (where the platform has the signal)."""
    if not hasattr(signal, "SIGHUP"):
        return
    loop = asyncio.get_running_loop()
    if handler is None:
        loop.remove_signal_handler(signal.SIGHUP)
    else:
        loop.add_signal_handler(signal.SIGHUP, handler)


def _install_error_handlers(app: FastAPI) -> None:
    """Errors raised outside the pipeline (unknown paths, wrong methods, bugs)
    still answer in OpenAI's shape."""

    async def http_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return error_response(
            FrameworkError(exc.status_code, str(exc.detail), dict(exc.headers or {}))
        )

    async def invalid(_: Request, exc: Exception) -> Response:
        return error_response(InvalidRequest(str(exc)))

    async def unexpected(_: Request, exc: Exception) -> Response:
        log.exception("unhandled error", exc_info=exc)
        return error_response(InternalError("internal gateway error"))

    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(Exception, unexpected)
