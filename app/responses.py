"""The one place that turns a ``GatewayError`` into an HTTP response."""

from starlette.responses import JSONResponse, Response

from app.errors import EngineStatusError, GatewayError


def error_response(error: GatewayError) -> Response:
    headers = error.headers()
    if isinstance(error, EngineStatusError) and error.content is not None:
        return Response(
            error.content, status_code=error.status, headers=headers, media_type="application/json"
        )
    return JSONResponse(error.body(), status_code=error.status, headers=headers)
