"""The OpenAI-compatible routes the gateway serves."""

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from app.api.deps import ServicesDep
from app.errors import EngineUnavailable, GatewayError
from app.keys.identify import authenticate
from app.pipeline import serve_completion
from app.responses import error_response

router = APIRouter(prefix="/v1")


@router.post("/chat/completions")
async def chat_completions(request: Request, services: ServicesDep) -> Response:
    return await serve_completion(request, "chat", services)


@router.post("/completions")
async def completions(request: Request, services: ServicesDep) -> Response:
    return await serve_completion(request, "completions", services)


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
