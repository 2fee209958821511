"""A stored response of the Responses API: ``GET /v1/responses/{id}`` and
``POST /v1/responses/{id}/cancel``, passed to the engine that holds it.

vLLM keeps a response in the engine that made it (``app.request.response_ids``
says which, or finds it). These calls are authenticated and logged (one
access-log line), not admitted: they read or change that engine's memory,
not its KV cache. What the engine answers comes back as it is: the stored
response, or its own refusal (cancelling a response that is not a
background one is a 400 there; the gateway serves no background ones).
Retrieving a response as a stream (``stream=true``) replays a background
response's events: refused here, for the same reason.
"""

import time
from urllib.parse import quote

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.api.deps import ServicesDep
from app.keys.identify import identify
from app.request.error_responses import error_response
from app.request.errors import GatewayError, InvalidRequest
from app.request.response_ids import LOOK_SECONDS
from app.serve.request_id import current_request_id
from app.serve.services import Services

router = APIRouter(prefix="/v1/responses")


@router.get("/{response_id}")
async def retrieve(response_id: str, request: Request, services: ServicesDep) -> Response:
    return await _to_holder(response_id, "", request, services)


@router.post("/{response_id}/cancel")
async def cancel(response_id: str, request: Request, services: ServicesDep) -> Response:
    return await _to_holder(response_id, "/cancel", request, services)


async def _to_holder(
    response_id: str, action: str, request: Request, services: Services
) -> Response:
    arrival, key_id = time.perf_counter(), None
    try:
        identity, _ = identify(request.headers, services.keys.ring if services.keys else None)
        key_id = identity.key_id
        if request.query_params.get("stream", "false").lower() not in ("false", "0"):
            raise InvalidRequest(
                "stream: only a background response is retrieved as a stream, and the"
                " gateway serves none",
                param="stream",
            )
        holder = await services.responses.locate(response_id, identity.tenant)
        path = f"/v1/responses/{quote(response_id, safe='')}{action}"
        response = await _call(services, holder.engine, path, post=bool(action))
    except GatewayError as error:
        response = error_response(error)
    route = "responses.cancel" if action else "responses.retrieve"
    services.telemetry.uncounted(route, response.status_code, arrival, key_id)
    return response


async def _call(services: Services, engine: str, path: str, *, post: bool) -> Response:
    client = services.engine_client
    if not post:
        answer = await client.get(engine, path, timeout=LOOK_SECONDS)
        return Response(answer.body, status_code=answer.status, media_type="application/json")
    opened = await client.open(
        engine, path, b"", current_request_id.get(), stream=False, timeout=LOOK_SECONDS
    )
    try:
        content = await opened.read()
    finally:
        opened.close()
    return Response(content, status_code=opened.status, media_type="application/json")
