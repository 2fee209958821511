"""Load for the live test through gateways in front of one engine: every
outcome, rejection reason, cancellation phase and queue priority the panels
break out, engine preemptions, and a gateway draining."""

import asyncio
import contextlib
import random
import signal

import httpx

from deploy.local import metric
from tests.support.engines import ENGINE_MAX_NUM_SEQS, MODEL, Engine
from tests.support.gateways import Gateway
from tests.support.raw_http import close, connect, read_response, request_bytes
from tests.support.streams import hold_streams, open_stream, read_content_chunks
from tests.support.wait import wait_for

LONG = {"model": MODEL, "max_tokens": 1500, "ignore_eos": True}


async def outcomes_and_refusals(http: httpx.AsyncClient, gateways: dict[str, Gateway]) -> None:
    """Completed (both finish reasons), failed, refused by the engine, invalid,
    too large, unavailable; a client that leaves while its body arrives."""
    admission, direct, nowhere, impatient = (
        gateways[k].url for k in ("admission", "direct", "no-engine", "impatient")
    )
    for url in (admission, direct):
        for i in range(6):
            await http.post(
                f"{url}/v1/completions",
                json={"model": MODEL, "prompt": f"Story {i}", "max_tokens": 200},
            )
            await http.post(
                f"{url}/v1/completions", json={**LONG, "prompt": f"Fixed {i}", "max_tokens": 20}
            )
    # The engine takes longer than the gateway allows a non-streaming call.
    timed_out = await http.post(f"{impatient}/v1/completions", json={**LONG, "prompt": "x"})
    assert timed_out.status_code == 504
    await http.post(
        f"{admission}/v1/completions", json={"model": MODEL, "prompt": "x", "temperature": -3}
    )
    await http.post(f"{admission}/v1/completions", content=b"{not json")
    await http.post(f"{admission}/v1/completions", content=b"x" * (5 * 1024 * 1024))
    await http.post(f"{nowhere}/v1/completions", json={"model": MODEL, "prompt": "x"})
    await abandon_upload(admission)
    await refuse_while_receiving(http, gateways["impatient"])


async def abandon_upload(url: str) -> None:
    head, body = request_bytes("/v1/completions", {"model": MODEL, "prompt": "x" * 100})
    _, writer = await connect(url)
    writer.write(head + body[:10])
    await writer.drain()
    await close(writer)


async def refuse_while_receiving(http: httpx.AsyncClient, gateway: Gateway) -> None:
    """The gateway receives one body at a time: an upload that stalls holds
    that place, the next request is refused (``overloaded``), and the upload
    runs out of time (``body_timeout``)."""
    head, body = request_bytes("/v1/completions", {"model": MODEL, "prompt": "x" * 100})
    reader, writer = await connect(gateway.url)
    try:
        writer.write(head + body[:10])
        await writer.drain()
        assert await wait_for(lambda: gateway.metric("gateway_requests_receiving") == 1, timeout=30)
        refused = await http.post(f"{gateway.url}/v1/completions", json={"model": MODEL})
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "overloaded"
        status, _, _ = await asyncio.wait_for(read_response(reader), timeout=60)
        assert status == 408
    finally:
        await close(writer)


async def queue_with_every_priority(http: httpx.AsyncClient, admission: str) -> None:
    """The admission gateway's two slots taken: its queue fills with every
    priority; one client leaves while queued, the others time out, and one
    more finds the queue full."""
    cancelled = metric(admission, "gateway_cancellations_total", phase="queued")
    refused = metric(admission, "gateway_rejections_total", reason="queue_full")
    blockers = await hold_streams(http, admission, LONG, 2)
    try:
        waiting = [
            asyncio.create_task(
                http.post(
                    f"{admission}/v1/completions",
                    json={**LONG, "prompt": p},
                    headers={"X-Priority": p},
                )
            )
            for p in ("high", "normal", "low")
        ]
        leaving = asyncio.create_task(
            http.post(f"{admission}/v1/completions", json={**LONG, "prompt": "impatient"})
        )
        # All four queued: the queue is at its depth (until they time out).
        assert await wait_for(lambda: queued(admission) == 4, timeout=30)
        # Of the lowest class and the same tenant: nobody queued gives it a place.
        full = await http.post(
            f"{admission}/v1/completions",
            json={**LONG, "prompt": "one too many"},
            headers={"X-Priority": "low"},
        )
        leaving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await leaving
        assert full.status_code == 429
        assert metric(admission, "gateway_rejections_total", reason="queue_full") == refused + 1
        assert await wait_for(
            lambda: (
                metric(admission, "gateway_cancellations_total", phase="queued") == cancelled + 1
            ),
            timeout=30,
        )
        for task in waiting:
            timed_out = await task
            assert timed_out.status_code == 429
            assert "not started within its objective" in timed_out.json()["error"]["message"]
    finally:
        for blocker in blockers:
            await blocker.aclose()


def queued(url: str) -> float:
    return metric(url, "gateway_queue_depth")


async def engine_phases(http: httpx.AsyncClient, engine: Engine, direct: str) -> None:
    """Through the gateway without admission: cancel mid-stream, during a
    non-streaming call and before the first token of a saturated engine,
    which preempts."""
    async with httpx.AsyncClient(base_url=direct, timeout=120) as direct_http:
        async with open_stream(direct_http, {**LONG, "prompt": "Leave mid-stream"}) as response:
            await read_content_chunks(response, 3)
        await leave_while_in_flight(direct_http, direct)

        saturating = await hold_streams(
            http, engine.url, {**LONG, "prompt": str(random.random())}, ENGINE_MAX_NUM_SEQS
        )
        preempted = engine.metric("vllm:num_preemptions_total")
        try:
            assert await wait_for(
                lambda: engine.metric("vllm:num_requests_running") == ENGINE_MAX_NUM_SEQS,
                timeout=60,
            )
            cancelled = metric(direct, "gateway_cancellations_total", phase="waiting_first_token")
            leaving = {**LONG, "prompt": "Leave before first token"}
            async with open_stream(direct_http, leaving) as _:
                # Every slot taken and none preempted yet: what waits is this request.
                assert await wait_for(
                    lambda: (
                        engine.metric("vllm:num_requests_waiting") >= 1
                        and engine.metric("vllm:num_preemptions_total") == preempted
                    ),
                    timeout=60,
                )
            assert await wait_for(
                lambda: (
                    metric(direct, "gateway_cancellations_total", phase="waiting_first_token")
                    == cancelled + 1
                ),
                timeout=30,
            )
            # Let the blockers outgrow the KV cache and preempt each other.
            assert await wait_for(
                lambda: engine.metric("vllm:num_preemptions_total") > preempted, timeout=600
            )
        finally:
            for blocker in saturating:
                await blocker.aclose()


async def leave_while_in_flight(http: httpx.AsyncClient, gateway: str) -> None:
    """A non-streaming call whose client leaves once the gateway has sent it
    to the engine."""
    # Nothing else through this gateway (the last stream has let go).
    assert await wait_for(lambda: metric(gateway, "gateway_requests_in_flight") == 0, timeout=30)
    cancelled = metric(gateway, "gateway_cancellations_total", phase="non_streaming")
    call = asyncio.create_task(
        http.post("/v1/completions", json={**LONG, "prompt": "Leave non-streaming"})
    )
    assert await wait_for(lambda: metric(gateway, "gateway_requests_in_flight") == 1, timeout=30)
    call.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await call
    assert await wait_for(
        lambda: (
            metric(gateway, "gateway_cancellations_total", phase="non_streaming") == cancelled + 1
        ),
        timeout=30,
    )


async def drain(direct: Gateway) -> None:
    """A stream in flight keeps the gateway draining while a new request is
    turned away."""
    async with (
        httpx.AsyncClient(base_url=direct.url, timeout=120) as http,
        open_stream(http, {**LONG, "prompt": "Last one"}) as response,
    ):
        chunks = response.aiter_raw()
        assert await anext(chunks)
        direct.process.signal(signal.SIGTERM)
        assert await wait_for(lambda: direct.metric("gateway_draining") == 1, timeout=30)
        refused = await http.post("/v1/completions", json={**LONG, "prompt": "late"})
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "draining"
        async for _ in chunks:
            pass
