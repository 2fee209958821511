"""The ASGI entry (``app.api.entry``): a method other than POST on a
completion route is a 405 that names POST in ``Allow``, and what FastAPI does
not know a 404, both in OpenAI's shape. In-process."""

import pytest

from tests.support.asgi import in_process_gateway

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("GET", "/v1/nothing", 404), ("GET", CHAT, 405), ("DELETE", COMPLETIONS, 405)],
)
async def test_unknown_routes_and_methods_answer_in_openai_shape(
    method: str, path: str, status: int
) -> None:
    async with in_process_gateway() as gateway:
        exchange = await gateway.request(path, b"", method=method).done()
        assert exchange.status == status
        error = exchange.json()["error"]
        assert set(error) >= {"message", "type", "param", "code"}
        assert error["message"]
        assert gateway.engine.calls.empty()


@pytest.mark.parametrize(
    ("method", "path"), [("GET", CHAT), ("PUT", COMPLETIONS), ("OPTIONS", CHAT)]
)
async def test_a_405_names_the_method_the_route_allows(method: str, path: str) -> None:
    # RFC 9110 15.5.6: a 405 carries Allow.
    async with in_process_gateway() as gateway:
        exchange = await gateway.request(path, b"", method=method).done()
        assert exchange.status == 405
        assert exchange.headers["allow"] == "POST"
        assert exchange.json()["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [("POST", "/v1/models", "GET"), ("POST", "/health/live", "GET"), ("PUT", "/metrics", "GET")],
)
async def test_the_frameworks_own_405s_name_what_the_route_allows(
    method: str, path: str, allowed: str
) -> None:
    async with in_process_gateway() as gateway:
        exchange = await gateway.request(path, b"", method=method).done()
        assert exchange.status == 405
        assert exchange.headers["allow"] == allowed
        assert exchange.json()["error"]["type"] == "invalid_request_error"
