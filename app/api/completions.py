"""The OpenAI-compatible routes the gateway serves."""

import httpx
from fastapi import APIRouter, Request
from starlette.responses import Response

from app.api.deps import ServicesDep
from app.errors import EngineUnavailable
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
async def models(services: ServicesDep) -> Response:
    """The engine's model list, passed through."""
    try:
        upstream = await services.engine.get("/v1/models", timeout=services.settings.health_timeout)
    except httpx.HTTPError:
        upstream = None
    if upstream is None or upstream.status_code != 200:
        return error_response(
            EngineUnavailable(
                "the engine is not available",
                retry_after=services.settings.retry_after_unavailable,
            )
        )
    return Response(upstream.content, media_type="application/json")
