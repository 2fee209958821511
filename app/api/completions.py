"""The OpenAI-compatible routes FastAPI serves: ``/v1/models`` and
``/v1/models/{model}``.

The admitted routes (chat, completions, responses, embeddings) are taken at
the entry (``app.api.entry``); a stored response's are ``app.api.stored_responses``."""

import time
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from app.api.deps import ServicesDep
from app.keys.identify import authenticate
from app.request.error_responses import error_response
from app.request.errors import EngineUnavailable, GatewayError, ModelNotFound

router = APIRouter(prefix="/v1")


@router.get("/models")
async def models(request: Request, services: ServicesDep) -> Response:
    """The union of the models the engines that are up serve (those the
    key may call); one access-log line (no outcome is counted for it)."""
    return _answer(request, services, lambda listed: listed)


@router.get("/models/{model:path}")
async def model(model: str, request: Request, services: ServicesDep) -> Response:
    """One model of that union, as OpenAI's ``GET /v1/models/{model}``
    answers (vLLM 0.32 has no such route: this is the gateway's own)."""

    def one(listed: dict[str, Any]) -> dict[str, Any]:
        for entry in listed["data"]:
            if entry["id"] == model:
                return dict(entry)
        raise ModelNotFound(f"The model `{model}` does not exist.", param="model")

    return _answer(request, services, one)


def _answer(
    request: Request, services: ServicesDep, pick: Callable[[dict[str, Any]], dict[str, Any]]
) -> Response:
    arrival, key_id = time.perf_counter(), None
    try:
        listed = services.engines.catalog.listing()
        if services.keys is not None:
            key = authenticate(request.headers, services.keys.ring)
            key_id = key.id
            # What the key may not call, it does not see.
            listed["data"] = [m for m in listed["data"] if key.may_call(m["id"])]
        if not services.engines.up and not services.engines.catalog.cold:
            raise EngineUnavailable(
                "no engine is available", retry_after=services.settings.retry_after_unavailable
            )
        response: Response = JSONResponse(pick(listed))
    except GatewayError as error:
        response = error_response(error)
    services.telemetry.uncounted("models", response.status_code, arrival, key_id)
    return response
