"""``/status`` on the admin port (see ``app.observe.status``)."""

from fastapi import APIRouter
from starlette.responses import JSONResponse, Response

from app.api.deps import ServicesDep
from app.api.files import BatchesDep
from app.observe.status import gateway_status

router = APIRouter()


@router.get("/status")
async def status(services: ServicesDep, batches: BatchesDep) -> Response:
    return JSONResponse({**gateway_status(services), "batches": batches.runner.status()})
