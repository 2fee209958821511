"""Liveness, readiness and the gateway's own metrics."""

from fastapi import APIRouter
from prometheus_client.exposition import choose_encoder
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.api.deps import ServicesDep

router = APIRouter()


@router.get("/health/live")
async def live() -> Response:
    return JSONResponse({"status": "ok"})


@router.get("/health/ready")
async def ready(services: ServicesDep) -> Response:
    """Ready while at least one engine answers and the gateway is not draining."""
    if services.drain.draining:
        return JSONResponse({"status": "draining"}, status_code=503)
    up = len(services.engines.up_engines())
    if not up:
        return JSONResponse({"status": "no engine available"}, status_code=503)
    return JSONResponse({"status": "ready", "engines_up": up})


@router.get("/metrics")
async def metrics(request: Request, services: ServicesDep) -> Response:
    """Prometheus's text format, or OpenMetrics when the scraper asks for it
    (Prometheus does by default): only OpenMetrics carries the latency
    histograms' exemplars (the trace ids of traced requests)."""
    encode, content_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encode(services.metrics.registry), headers={"Content-Type": content_type})
