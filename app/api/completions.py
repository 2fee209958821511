"""The OpenAI-compatible routes FastAPI serves: ``/v1/models``.

The two completion routes are taken at the entry (``app.api.entry``)."""

import time

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from app.api.deps import ServicesDep
from app.errors import EngineUnavailable, GatewayError
from app.keys.identify import authenticate
from app.responses import error_response

router = APIRouter(prefix="/v1")


@router.get("/models")
async def models(request: Request, services: ServicesDep) -> Response:
    """The union of the models the engines that are up serve; one access-log
    line (no outcome is counted for it)."""
    arrival, key_id = time.perf_counter(), None
    try:
        if services.keys is not None:
            key_id = authenticate(request.headers, services.keys.ring).id
        if not services.engines.up:
            raise EngineUnavailable(
                "no engine is available", retry_after=services.settings.retry_after_unavailable
            )
        response: Response = JSONResponse(services.engines.model_list())
    except GatewayError as error:
        response = error_response(error)
    services.telemetry.uncounted("models", response.status_code, arrival, key_id)
    return response
