"""Scale from zero against the real engine: a gate keeps the session's vLLM
unreachable, as an engine that is still starting is; requests for the cold
model are held, not refused, and served once the gate opens; one held past
its budget is refused with its reason and a Retry-After from the start the
gateway saw.

Two gateways in front of the one gate: one with a budget longer than the
start (everything it holds is served), one with a budget of a few seconds
(what is held past it is refused: at first with the fallback, since no
start was seen yet; after one was, with that start's time less the wait).
While the requests are held, the live page (in a real browser) names them."""

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI

from deploy.local import free_port, metric
from tests.support.browser import headless_chromium
from tests.support.engines import MODEL, Engine
from tests.support.gateways import StartGateway
from tests.support.tcp_proxy import TcpProxy
from tests.support.wait import wait_until

HELD = 20
# How long the engine stays unreachable after the first request is held.
START_SECONDS = 30.0
LONG_BUDGET = 90.0
SHORT_BUDGET = 3.0
FALLBACK = 5  # GATEWAY_RETRY_AFTER_UNAVAILABLE: no start seen yet
BODY = {"model": MODEL, "prompt": "Once", "max_tokens": 8, "stream": True}


@pytest.fixture
async def gate(idle_engine: Engine) -> AsyncIterator[TcpProxy]:
    proxy = TcpProxy(idle_engine.url)
    proxy.closed()
    try:
        yield proxy
    finally:
        await proxy.aclose()


class Cold:
    """A gateway of the test's, and its admin port (``/metrics``, ``/status``)."""

    def __init__(self, start_gateway: StartGateway, gate: TcpProxy, budget: float) -> None:
        admin = free_port()
        self.gateway = start_gateway(
            gate.url,
            cold_models=f"{MODEL}=2048",
            cold_start_timeout=budget,
            queue_status_interval=1.0,
            admin_port=admin,
        )
        self.url = self.gateway.url
        self.admin = f"http://127.0.0.1:{admin}"

    def metric(self, name: str, **labels: str) -> float:
        return metric(self.admin, name, **labels)

    def status(self) -> dict[str, Any]:
        cold: dict[str, Any] = httpx.get(f"{self.admin}/status").json()["cold_start"]
        return cold


async def held_stream(http: httpx.AsyncClient, status: bool) -> tuple[int, bytes]:
    headers = {"x-queue-status": "on"} if status else {}
    async with http.stream("POST", "/v1/completions", json=BODY, headers=headers) as response:
        return response.status_code, b"".join([part async for part in response.aiter_raw()])


async def refused(url: str) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        response = await http.post("/v1/completions", json={**BODY, "stream": False})
    return response, time.monotonic() - started


async def test_requests_held_through_a_cold_start_are_served_and_past_the_budget_refused(
    start_gateway: StartGateway, gate: TcpProxy
) -> None:
    patient = Cold(start_gateway, gate, LONG_BUDGET)
    hasty = Cold(start_gateway, gate, SHORT_BUDGET)
    engine = gate.url.removeprefix("http://")

    # Listed while no engine is up, with its configured length.
    async with AsyncOpenAI(base_url=f"{patient.url}/v1", api_key="-") as client:
        models = await client.models.list()
    assert [(m.id, m.model_extra) for m in models.data] == [(MODEL, {"max_model_len": 2048})]

    # Held past the short budget before any start was seen: the fallback.
    first, waited = await refused(hasty.url)
    assert first.status_code == 503
    assert first.json()["error"]["code"] == "cold_start_timeout"
    assert first.headers["retry-after"] == str(FALLBACK)
    assert waited >= SHORT_BUDGET

    async with httpx.AsyncClient(base_url=patient.url, timeout=120) as http:
        streams = [asyncio.create_task(held_stream(http, status=i % 2 == 0)) for i in range(HELD)]
        held_at = time.monotonic()
        assert await asyncio.to_thread(
            wait_until,
            lambda: patient.metric("gateway_requests_held", model=MODEL) == HELD,
            timeout=30,
        )
        # Holding hides no outage: the engine shows down, as the alerts read it.
        assert patient.metric("gateway_upstream_up", engine=engine) == 0
        assert patient.status()["models"][MODEL] == {"held": HELD, "serving": False}
        # The live page says what waits for an engine, while the start runs.
        async with headless_chromium() as browser:
            page = await browser.new_page()
            await page.goto(f"{patient.admin}/live?every=0.5")
            held_line = f"held for an engine to start: {MODEL} {HELD}"
            await page.wait_for_function(
                f"document.getElementById('held')?.textContent === {held_line!r}",
                timeout=60_000,
            )
        await asyncio.sleep(max(0.0, START_SECONDS - (time.monotonic() - held_at)))
        assert patient.metric("gateway_requests_held", model=MODEL) == HELD
        await gate.open()
        answers = await asyncio.gather(*streams)

    assert [code for code, _ in answers] == [200] * HELD
    assert all(raw.endswith(b"data: [DONE]\n\n") for _, raw in answers)
    told = [raw for i, (_, raw) in enumerate(answers) if i % 2 == 0]
    assert all(b": queued position=" in raw for raw in told)
    assert patient.metric("gateway_requests_held", model=MODEL) == 0
    assert patient.metric("gateway_rejections_total", reason="cold_start") == 0
    assert patient.metric("gateway_requests_total", route="completions", outcome="completed") == (
        HELD
    )
    assert patient.metric("gateway_cold_start_seconds_count", model=MODEL) == 1
    assert patient.metric("gateway_cold_start_seconds_sum", model=MODEL) >= START_SECONDS

    # The short-budget gateway saw the same start, from its own first held request.
    assert await asyncio.to_thread(
        wait_until, lambda: hasty.metric("gateway_upstream_up", engine=engine) == 1, timeout=30
    )
    (start,) = hasty.status()["last_starts_seconds"][MODEL]
    assert start >= START_SECONDS

    # The engine goes away again; one request held past the budget is told
    # when an engine should be up: the start seen, less what it waited.
    await gate.refuse()
    assert await asyncio.to_thread(
        wait_until, lambda: hasty.metric("gateway_upstream_up", engine=engine) == 0, timeout=30
    )
    second, waited = await refused(hasty.url)
    assert second.status_code == 503
    error = second.json()["error"]
    assert error["code"] == "cold_start_timeout"
    assert "came up within 3s" in error["message"]
    told_after = int(second.headers["retry-after"])
    assert start - waited - 1 <= told_after <= start - SHORT_BUDGET + 1
    assert hasty.metric("gateway_rejections_total", reason="cold_start") == 2
    # Every request ended with one outcome, none failed.
    assert hasty.metric("gateway_requests_total", route="completions", outcome="rejected") == 2
    assert patient.metric("gateway_requests_total", route="completions", outcome="failed") == 0
