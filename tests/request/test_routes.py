"""The route table (``app.request.routes``): every admitted route is reached at its
path, sent to the engine's, its answer's usage read by its own field names
and counted under its name; a table that misses a route, or names one
twice, is refused; and vLLM's routes the table does not name are not
reachable through the gateway. In-process, against a scripted engine."""

from dataclasses import replace
from typing import Any

import pytest
from starlette.testclient import TestClient, WebSocketDenialResponse

from app.main import create_app
from app.request.routes import ROUTES, ApiRoute, indexed
from app.settings import Settings
from tests.support.asgi import in_process_gateway
from tests.support.audio import audio_form
from tests.support.scripted_engine import MODEL, ScriptedEngine

# A small body for each admitted route: a route added to the table without
# one here fails below.
BODIES: dict[str, dict[str, Any]] = {
    "chat": {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    "batch_chat": {
        "model": MODEL,
        "messages": [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "yo"}]],
        "max_tokens": 4,
    },
    "completions": {"model": MODEL, "prompt": "hi", "max_tokens": 4},
    "responses": {"model": MODEL, "input": "hi", "max_output_tokens": 4},
    "messages": {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    "embeddings": {"model": MODEL, "input": "hi"},
    "pooling": {"model": MODEL, "input": "hi"},
    "classify": {"model": MODEL, "input": ["hi", "yo"]},
    "score": {"model": MODEL, "text_1": "hi", "text_2": ["yo", "ho"]},
    "rerank": {"model": MODEL, "query": "hi", "documents": ["yo", "ho"]},
    # The audio routes' forms (``audio_form``): their fields beside the file.
    "transcriptions": {"language": "en", "max_completion_tokens": "4"},
    "translations": {"max_completion_tokens": "4"},
}

# vLLM 0.32's routes that the gateway does not admit, on purpose: prompt
# rendering without generation, its other generate API, elastic scaling,
# and the operator routes (weights, sleep, profiling, caches, LoRA loading)
# that are the engine's operator's, not an API client's.
NOT_ADMITTED = (
    "/v1/chat/completions/render",
    "/v1/chat/completions/derender",
    "/v1/completions/render",
    "/v1/completions/derender",
    "/v1/responses/render",
    "/v1/messages/render",
    "/inference/v1/generate",
    "/inference/v1/abort_requests",
    "/v2/embed",
    "/generative_scoring",
    "/scale_elastic_ep",
    "/is_scaling_elastic_ep",
    "/v1/load_lora_adapter",
    "/v1/unload_lora_adapter",
    "/reset_prefix_cache",
    "/sleep",
    "/wake_up",
    "/collective_rpc",
    "/update_weights",
    "/start_profile",
    "/abort_requests",
    "/pause",
    "/server_info",
    "/invocations",
)
# vLLM's routes the gateway answers with a 501 that says why: realtime
# transcription (a WebSocket session).
NOT_RELAYED = ("/v1/realtime",)


@pytest.mark.parametrize("route", ROUTES.values(), ids=lambda route: route.name)
async def test_each_route_is_reached_at_its_path_and_counted_under_its_name(
    route: ApiRoute,
) -> None:
    # An audio window holds 1,500 encoder positions: blocks of 128 hold one.
    engine = ScriptedEngine(block_size=128 if route.body == "form" else 16)
    async with in_process_gateway(engine) as gateway:
        if route.body == "form":
            form, headers = audio_form(MODEL, **BODIES[route.name])
            exchange = gateway.request(route.path, form, headers=headers)
        else:
            exchange = gateway.request(route.path, BODIES[route.name])
        call = await gateway.engine.calls.get()
        assert call.path == route.engine_path
        usage = {route.usage.prompt[0]: 7, route.usage.output: 3}
        call.answer(200, {"usage": usage})
        await exchange.done()
        assert exchange.status == 200
        completed = {"route": route.name, "outcome": "completed"}
        assert gateway.metric("gateway_requests_total", **completed) == 1
        assert gateway.metric("gateway_tokens_total", kind="prompt") == 7
        assert gateway.metric("gateway_tokens_total", kind="completion") == 3
        assert gateway.settled()


def test_a_table_without_a_routes_entry_is_refused() -> None:
    table = tuple(route for route in ROUTES.values() if route.name != "embeddings")
    with pytest.raises(ValueError, match="no entry for embeddings"):
        indexed(table)


def test_a_table_that_names_a_path_twice_is_refused() -> None:
    chat, completions = ROUTES["chat"], ROUTES["completions"]
    table = (*ROUTES.values(), chat)
    with pytest.raises(ValueError, match="twice"):
        indexed(table)
    aliased = tuple(r for r in ROUTES.values() if r is not completions)
    with pytest.raises(ValueError, match="twice"):
        indexed((*aliased, replace(completions, path=chat.path)))


@pytest.mark.parametrize("path", NOT_ADMITTED)
async def test_what_the_table_does_not_name_is_not_reachable(path: str) -> None:
    async with in_process_gateway() as gateway:
        exchange = await gateway.request(path, {"model": MODEL}).done()
        # /v1/responses/render is a stored response's path to the gateway,
        # which only GETs it: a 405 naming GET.
        assert exchange.status == (405 if path == "/v1/responses/render" else 404)
        assert exchange.json()["error"]["type"] == "invalid_request_error"
        assert gateway.engine.calls.empty()


@pytest.mark.parametrize("path", NOT_RELAYED)
async def test_a_route_the_gateway_does_not_relay_is_a_501_that_says_why(path: str) -> None:
    async with in_process_gateway() as gateway:
        exchange = await gateway.request(path, {"model": MODEL}).done()
        assert exchange.status == 501
        error = exchange.json()["error"]
        assert error["code"] == "not_served"
        assert "not" in error["message"]
        assert gateway.engine.calls.empty()


def test_a_realtime_websocket_is_denied_with_the_same_501() -> None:
    """vLLM's /v1/realtime is a WebSocket: its handshake gets the 501 as an
    HTTP answer (ASGI's denial response), not a bare close."""
    http = TestClient(create_app(Settings()))  # no lifespan: refused before any service
    with (
        pytest.raises(WebSocketDenialResponse) as denied,
        http.websocket_connect("/v1/realtime?model=whisper"),
    ):
        pass
    assert denied.value.status_code == 501
    assert denied.value.json()["error"]["code"] == "not_served"


@pytest.mark.parametrize(
    ("route", "alias"),
    [(route, alias) for route in ROUTES.values() for alias in route.aliases],
    ids=lambda value: value if isinstance(value, str) else value.name,
)
async def test_an_alias_reaches_its_route_and_the_engine_at_the_path_asked(
    route: ApiRoute, alias: str
) -> None:
    async with in_process_gateway() as gateway:
        exchange = gateway.request(alias, BODIES[route.name])
        call = await gateway.engine.calls.get()
        assert call.path == alias
        call.answer(200, {"usage": {"prompt_tokens": 4}})
        await exchange.done()
        assert exchange.status == 200
        completed = {"route": route.name, "outcome": "completed"}
        assert gateway.metric("gateway_requests_total", **completed) == 1
