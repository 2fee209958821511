"""``/v1/files``: the Batch API's files (``app.batch.files``), each the
tenant's own: another tenant's id is a 404, as one that does not exist."""

import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from redis.exceptions import RedisError
from starlette.responses import FileResponse, JSONResponse, Response

from app.api.deps import ServicesDep
from app.batch import files
from app.batch.batches import page
from app.batch.service import Batches
from app.keys.identify import identify
from app.request.error_responses import error_response
from app.request.errors import GatewayError, NotFound, StorageUnavailable
from app.serve.services import Services

router = APIRouter(prefix="/v1")
log = logging.getLogger("gateway.batch")


def get_batches(request: Request) -> Batches:
    batches: Batches = request.state.batches
    return batches


BatchesDep = Annotated[Batches, Depends(get_batches)]


async def answer(
    request: Request,
    services: Services,
    name: str,
    work: Callable[[str, str | None], Awaitable[Response | dict[str, Any]]],
) -> Response:
    """Identify the caller (its tenant, and its key's hash), do ``work``,
    answer errors in OpenAI's shape; one access-log line."""
    arrival, key_id = time.perf_counter(), None
    try:
        identity, key = identify(request.headers, services.keys.ring if services.keys else None)
        key_id = identity.key_id
        done = await work(identity.tenant, None if key is None else key.sha256)
        response = done if isinstance(done, Response) else JSONResponse(done)
    except GatewayError as error:
        response = error_response(error)
    except (OSError, sqlite3.Error, RedisError) as error:
        log.error("the Batch API's storage failed: %r", error)
        unavailable = StorageUnavailable(
            "the gateway cannot keep files and batches now; retry later",
            retry_after=services.settings.retry_after_unavailable,
        )
        response = error_response(unavailable)
    services.telemetry.uncounted(name, response.status_code, arrival, key_id)
    return response


async def owned_file(batches: Batches, tenant: str, file_id: str) -> dict[str, Any]:
    found = await batches.state.get_file(tenant, file_id)
    if found is None:
        raise NotFound(f"No such File object: {file_id}")
    return found


@router.post("/files")
async def upload(request: Request, services: ServicesDep, batches: BatchesDep) -> Response:
    async def work(tenant: str, _: str | None) -> dict[str, Any]:
        record = await files.upload(request, batches.state, tenant, batches.limits)
        return files.object_of(record)

    return await answer(request, services, "files", work)


@router.get("/files")
async def list_files(
    request: Request,
    services: ServicesDep,
    batches: BatchesDep,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 10_000,
    order: Literal["asc", "desc"] = "desc",
    purpose: str | None = None,
) -> Response:
    async def work(tenant: str, _: str | None) -> dict[str, Any]:
        found = await batches.state.list_files(tenant, purpose, order)
        return page([files.object_of(r) for r in found], after, limit)

    return await answer(request, services, "files", work)


@router.get("/files/{file_id}")
async def get_file(
    file_id: str, request: Request, services: ServicesDep, batches: BatchesDep
) -> Response:
    async def work(tenant: str, _: str | None) -> dict[str, Any]:
        return files.object_of(await owned_file(batches, tenant, file_id))

    return await answer(request, services, "files", work)


@router.get("/files/{file_id}/content")
async def file_content(
    file_id: str, request: Request, services: ServicesDep, batches: BatchesDep
) -> Response:
    async def work(tenant: str, _: str | None) -> Response:
        await owned_file(batches, tenant, file_id)
        path = batches.state.path_of(file_id)
        if not path.exists():
            raise StorageUnavailable(
                f"the file {file_id} is not on this gateway's GATEWAY_BATCH_DIR: the gateways"
                " must share that directory",
                retry_after=services.settings.retry_after_unavailable,
            )
        return FileResponse(path, media_type="application/jsonl")

    return await answer(request, services, "files", work)


@router.delete("/files/{file_id}")
async def delete_file(
    file_id: str, request: Request, services: ServicesDep, batches: BatchesDep
) -> Response:
    async def work(tenant: str, _: str | None) -> dict[str, Any]:
        await owned_file(batches, tenant, file_id)
        await batches.state.delete_file(tenant, file_id)
        batches.state.path_of(file_id).unlink(missing_ok=True)
        return {"id": file_id, "object": "file", "deleted": True}

    return await answer(request, services, "files", work)
