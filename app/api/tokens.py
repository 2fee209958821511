"""vLLM's ``/tokenize``, ``/detokenize`` and Anthropic's
``/v1/messages/count_tokens``, passed through to an engine that serves the
model.

Authenticated as every API route is, and logged (one access-log line), but
not admitted: they hold no KV cache and run in the engine's API server, not
its scheduler. The body goes to the engine as the client sent it; what it
answers (its validation errors included) comes back as it is. The gateway's
own errors are in the shape of the route's API: Anthropic's on
``count_tokens``.
"""

import json
import time
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.api.deps import ServicesDep
from app.keys.file import KeyEntry
from app.keys.identify import authenticate
from app.request.error_responses import error_response
from app.request.errors import (
    EngineUnavailable,
    ErrorShape,
    GatewayError,
    InvalidRequest,
    ModelNotFound,
)
from app.request.validation import read_json_body
from app.serve.request_id import current_request_id
from app.serve.services import Services

router = APIRouter()


@router.post("/tokenize")
async def tokenize(request: Request, services: ServicesDep) -> Response:
    return await _pass_through("/tokenize", request, services)


@router.post("/detokenize")
async def detokenize(request: Request, services: ServicesDep) -> Response:
    return await _pass_through("/detokenize", request, services)


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request, services: ServicesDep) -> Response:
    return await _pass_through("/v1/messages/count_tokens", request, services, "anthropic")


async def _pass_through(
    path: str, request: Request, services: Services, shape: ErrorShape = "openai"
) -> Response:
    arrival, key_id = time.perf_counter(), None
    settings = services.settings
    try:
        key = None
        if services.keys is not None:
            key = authenticate(request.headers, services.keys.ring)
            key_id = key.id
        body = await read_json_body(request, settings.max_body_bytes, settings.body_timeout)
        engine = _engine_for(body.get("model"), services, key)
        served = services.engines.catalog.resolve(body["model"])
        if served != body["model"]:
            body = {**body, "model": served}
        answer = await services.engine_client.open(
            engine, path, json.dumps(body).encode(), current_request_id.get(), stream=False
        )
        try:
            content = await answer.read()
        finally:
            answer.close()
        response = Response(content, status_code=answer.status, media_type="application/json")
    except GatewayError as error:
        response = error_response(error, shape)
    services.telemetry.uncounted(path.lstrip("/"), response.status_code, arrival, key_id)
    return response


def _engine_for(model: Any, services: Services, key: KeyEntry | None) -> str:
    """An engine that serves ``model`` and may take requests now (the first
    of them: these calls are light, any will do); to a key that may not call
    ``model``, none."""
    if not isinstance(model, str) or not model:
        raise InvalidRequest("`model` is required", param="model")
    if not services.engines.up:
        raise EngineUnavailable(
            "no engine is available", retry_after=services.settings.retry_after_unavailable
        )
    engine = services.engines.engine_for(services.engines.catalog.resolve(model))
    if engine is None or (key is not None and not key.may_call(model)):
        raise ModelNotFound(f"The model `{model}` does not exist.", param="model")
    return engine
