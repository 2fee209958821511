"""``POST /adapters/load`` and ``POST /adapters/unload`` on the admin port:
a LoRA adapter loaded into (or unloaded from) the engines, each engine's
answer reported (``app.engine.adapters``).

Body: ``{"name": "sql", "path": "/adapters/sql", "engines": 2}`` — ``path``
as the engines see it (their volume), ``engines`` how many (absent: every
engine that is up). 200 when every engine chosen has the change made (or
had it already), 502 when any failed: the body says which and why.
"""

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from app.api.deps import ServicesDep
from app.engine.adapters import EngineAnswer, chosen, load_adapter, unload_adapter
from app.engine.monitor import EngineMonitor
from app.request.error_responses import error_response
from app.request.errors import EngineUnavailable, GatewayError, InvalidRequest
from app.request.validation import read_json_body
from app.serve.request_id import current_request_id

router = APIRouter(prefix="/adapters")


@router.post("/load")
async def load(request: Request, services: ServicesDep) -> Response:
    try:
        body = await _body(request, services)
        name, count = _name(body), _count(body)
        path = body.get("path")
        if not isinstance(path, str) or not path:
            raise InvalidRequest(
                "`path` is required: the adapter's directory, as the engines see it", param="path"
            )
        monitors = chosen(_up(services), count)
        answers = await load_adapter(
            services.engine_client, monitors, name, path, current_request_id.get()
        )
    except GatewayError as error:
        return error_response(error)
    return _report(name, answers)


@router.post("/unload")
async def unload(request: Request, services: ServicesDep) -> Response:
    try:
        body = await _body(request, services)
        name = _name(body)
        # Unloading goes to every engine that is up unless told otherwise.
        monitors = chosen(_up(services), _count(body))
        answers = await unload_adapter(
            services.engine_client, monitors, name, current_request_id.get()
        )
    except GatewayError as error:
        return error_response(error)
    return _report(name, answers)


async def _body(request: Request, services: ServicesDep) -> dict[str, Any]:
    settings = services.settings
    return await read_json_body(request, settings.max_body_bytes, settings.body_timeout)


def _name(body: dict[str, Any]) -> str:
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidRequest("`name` is required: the adapter's model name", param="name")
    return name


def _count(body: dict[str, Any]) -> int | None:
    count = body.get("engines")
    if count is None:
        return None
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise InvalidRequest(
            "`engines` must be a whole number of engines, 1 or more", param="engines"
        )
    return count


def _up(services: ServicesDep) -> list[EngineMonitor]:
    monitors = [m for m in services.engines.up_engines() if m.up]
    if not monitors:
        raise EngineUnavailable(
            "no engine is available", retry_after=services.settings.retry_after_unavailable
        )
    return monitors


def _report(name: str, answers: list[EngineAnswer]) -> Response:
    engines = [
        {"engine": a.engine, "result": a.result, **({"detail": a.detail} if a.detail else {})}
        for a in answers
    ]
    status = 200 if all(a.ok for a in answers) else 502
    return JSONResponse({"adapter": name, "engines": engines}, status_code=status)
