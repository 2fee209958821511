"""The OpenAI-compatible routes FastAPI serves: ``/v1/models``.

The two completion routes are taken at the entry (``app.api.entry``)."""

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from app.api.deps import ServicesDep
from app.errors import EngineUnavailable, GatewayError
from app.keys.identify import authenticate
from app.responses import error_response

router = APIRouter(prefix="/v1")


@router.get("/models")
async def models(request: Request, services: ServicesDep) -> Response:
    """The union of the models the engines that are up serve."""
    if services.keys is not None:
        try:
            authenticate(request.headers, services.keys.ring)
        except GatewayError as error:
            return error_response(error)
    if not services.engines.up:
        return error_response(
            EngineUnavailable(
                "no engine is available", retry_after=services.settings.retry_after_unavailable
            )
        )
    return JSONResponse(services.engines.model_list())
