"""``/v1/batches``: a tenant's batches (``app.batch.batches``), run by the
app's runner (``app.batch.runner``)."""

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from app.api.deps import ServicesDep
from app.api.files import BatchesDep, answer, owned_file
from app.batch.batches import new_batch, object_of, page
from app.batch.service import Batches
from app.batch.store import now
from app.request.errors import InvalidRequest, NotFound

router = APIRouter(prefix="/v1")


async def owned_batch(batches: Batches, tenant: str, batch_id: str) -> dict[str, Any]:
    found = await batches.state.get_batch(tenant, batch_id)
    if found is None:
        raise NotFound(f"No such Batch object: {batch_id}")
    return found


@router.post("/batches")
async def create(request: Request, services: ServicesDep, batches: BatchesDep) -> Response:
    async def work(tenant: str, key_hash: str | None) -> dict[str, Any]:
        try:
            body = json.loads(await request.body())
        except ValueError:
            raise InvalidRequest("the body is not valid JSON") from None
        record = new_batch(body, tenant, batches.completion_window)
        source = await owned_file(batches, tenant, record["input_file_id"])
        if source["purpose"] != "batch":
            raise InvalidRequest(
                "input_file_id: a file uploaded for batches", param="input_file_id"
            )
        await batches.state.insert_batch(record, key_hash)
        batches.runner.wake()
        return object_of(record)

    return await answer(request, services, "batches", work)


@router.get("/batches")
async def list_batches(
    request: Request,
    services: ServicesDep,
    batches: BatchesDep,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> Response:
    async def work(tenant: str, _: str | None) -> dict[str, Any]:
        found = await batches.state.list_batches(tenant)
        return page([object_of(r) for r in found], after, limit)

    return await answer(request, services, "batches", work)


@router.get("/batches/{batch_id}")
async def get_batch(
    batch_id: str, request: Request, services: ServicesDep, batches: BatchesDep
) -> Response:
    async def work(tenant: str, _: str | None) -> dict[str, Any]:
        return object_of(await owned_batch(batches, tenant, batch_id))

    return await answer(request, services, "batches", work)


@router.post("/batches/{batch_id}/cancel")
async def cancel(
    batch_id: str, request: Request, services: ServicesDep, batches: BatchesDep
) -> Response:
    async def work(tenant: str, _: str | None) -> dict[str, Any]:
        await owned_batch(batches, tenant, batch_id)

        def cancelling(record: dict[str, Any]) -> None:
            if record["status"] in ("validating", "in_progress"):
                record.update(status="cancelling", cancelling_at=now())

        record = await batches.state.update_batch(batch_id, cancelling)
        batches.runner.wake()
        return object_of(record)

    return await answer(request, services, "batches", work)
