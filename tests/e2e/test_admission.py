"""Admission control in a running gateway, against the real engine."""

import asyncio
import contextlib
import random
import signal

import httpx

from tests.support.engines import MODEL, Engine, engine_idle
from tests.support.fairness import heavy_admitted_before_light_finished
from tests.support.gateways import Gateway, StartGateway, access_log
from tests.support.streams import hold_streams
from tests.support.wait import wait_for, wait_until

LONG = {"model": MODEL, "max_tokens": 1500, "ignore_eos": True}


async def start_blocker(http: httpx.AsyncClient) -> httpx.Response:
    """A long stream that holds the gateway's only admission slot."""
    (response,) = await hold_streams(http, str(http.base_url).rstrip("/"), LONG, 1)
    assert response.status_code == 200
    return response


def queue_depth(gateway: Gateway) -> float:
    return gateway.metric("gateway_queue_depth")


async def test_tenants_get_a_fair_share_of_admitted_tokens(
    idle_engine: Engine, start_gateway: StartGateway
) -> None:
    """Tenant A sends ten times B's load at equal priority, B's requests
    last: B is served within A's backlog, not after it (the share while both
    wait is measured in-process, tests/admission/test_fairqueue.py)."""
    gateway = start_gateway(idle_engine.url, max_concurrency=2, queue_timeout=300)

    async def one(http: httpx.AsyncClient, tenant: str, i: int) -> None:
        reply = await http.post(
            "/v1/completions",
            json={
                "model": MODEL,
                "prompt": f"Tenant {tenant} asks {i}",
                "max_tokens": 32,
                "ignore_eos": True,
            },
            headers={"X-Tenant-Id": tenant, "X-Request-Id": f"fair-{tenant}-{i}"},
        )
        assert reply.status_code == 200

    async with httpx.AsyncClient(base_url=gateway.url, timeout=300) as http:
        await asyncio.gather(
            *(one(http, "A", i) for i in range(40)), *(one(http, "B", i) for i in range(4))
        )

    entries = [e for e in access_log(gateway) if str(e["request_id"]).startswith("fair-")]
    assert len(entries) == 44
    before, heavy = heavy_admitted_before_light_finished(entries, light="B")
    print(f"\nA's requests admitted before B's last: {before} of {heavy}")
    # Fair: B's four alternate with A's from when they arrive; in arrival
    # order they would follow all 40.
    assert before <= heavy / 2


async def test_a_client_that_leaves_while_queued_never_reaches_the_engine(
    idle_engine: Engine, start_gateway: StartGateway
) -> None:
    gateway = start_gateway(idle_engine.url, max_concurrency=1)
    prompt_tokens = idle_engine.metric("vllm:prompt_tokens_total")
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        blocker = await start_blocker(http)
        try:
            # A prompt of 1,200 token ids: if it reached the engine, the
            # engine's prompt token counter would show it.
            prompt = [random.randrange(10, 1000) for _ in range(1200)]
            impatient = asyncio.create_task(
                http.post("/v1/completions", json={**LONG, "prompt": prompt, "max_tokens": 500})
            )
            assert await wait_for(lambda: queue_depth(gateway) == 1, timeout=30)
            impatient.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await impatient
            assert await wait_for(
                lambda: gateway.metric("gateway_cancellations_total", phase="queued") == 1,
                timeout=30,
            )
            assert queue_depth(gateway) == 0
        finally:
            await blocker.aclose()
    assert wait_until(lambda: engine_idle(idle_engine.metric), timeout=10)
    assert idle_engine.metric("vllm:prompt_tokens_total") - prompt_tokens < 1200
    assert wait_until(lambda: gateway.metric("gateway_kv_tokens_reserved") == 0, timeout=30)


async def test_a_full_queue_and_a_passed_deadline_get_429_with_retry_after(
    idle_engine: Engine, start_gateway: StartGateway
) -> None:
    gateway = start_gateway(
        idle_engine.url, max_concurrency=1, queue_max_depth=1, queue_timeout=1.5
    )
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        blocker = await start_blocker(http)
        try:
            waiting = asyncio.create_task(
                http.post("/v1/completions", json={**LONG, "prompt": "second"})
            )
            assert await asyncio.to_thread(wait_until, lambda: queue_depth(gateway) == 1, 30)
            full = await http.post("/v1/completions", json={**LONG, "prompt": "third"})
            timed_out = await waiting
        finally:
            await blocker.aclose()
    assert full.status_code == 429
    assert full.json()["error"]["code"] == "over_capacity"
    assert int(full.headers["retry-after"]) >= 1
    assert timed_out.status_code == 429
    assert "not started within its objective" in timed_out.json()["error"]["message"]
    assert int(timed_out.headers["retry-after"]) >= 1
    assert gateway.metric("gateway_rejections_total", reason="queue_full") == 1
    assert gateway.metric("gateway_rejections_total", reason="objective_expired") == 1


async def test_draining_turns_queued_requests_away(
    idle_engine: Engine, start_gateway: StartGateway
) -> None:
    # A grace long enough for the blocker to finish on a busy machine.
    gateway = start_gateway(
        idle_engine.url, max_concurrency=1, drain_grace_seconds=120, shutdown_timeout=150
    )
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        blocker = await start_blocker(http)
        queued = asyncio.create_task(http.post("/v1/completions", json={**LONG, "prompt": "q"}))
        assert await asyncio.to_thread(wait_until, lambda: queue_depth(gateway) == 1, 30)
        gateway.process.signal(signal.SIGTERM)
        refused = await queued
        body = b"".join([chunk async for chunk in blocker.aiter_raw()])
        await blocker.aclose()
    assert refused.status_code == 503
    assert refused.json()["error"]["code"] == "draining"
    assert body.endswith(b"data: [DONE]\n\n")
    assert await asyncio.to_thread(gateway.process.proc.wait, 180) == 0


async def test_nothing_is_lost_at_three_times_overload_with_cancellations(
    idle_engine: Engine, start_gateway: StartGateway
) -> None:
    """Every request that reaches the route ends in exactly one outcome, and
    afterwards nothing is left queued, in flight or reserved."""
    gateway = start_gateway(idle_engine.url, queue_max_depth=16, queue_timeout=4)
    rng = random.Random(3)
    sent = 72

    async def one(i: int) -> None:
        # A third of the clients give up at a random moment after their
        # request has been sent in full: queued, or mid-stream. They ask for
        # more than the engine can generate before they give up (at most
        # 2 s), so each of them that is not refused on arrival is cancelled,
        # whatever the machine's speed: several, not one that happened to
        # be slow (with short answers, one or two were).
        patience = rng.uniform(1.0, 2.0) if i % 3 == 0 else None
        body = {
            "model": MODEL,
            "prompt": f"Overload {i}",
            "max_tokens": 200 if patience is None else 1500,
            "ignore_eos": True,
            "stream": True,
        }
        headers = {"X-Request-Id": f"overload-{i}"}
        sent_in_full = asyncio.Event()

        async def trace(event: str, info: dict[str, object]) -> None:
            if event == "http11.send_request_body.complete":
                sent_in_full.set()

        async def call(http: httpx.AsyncClient) -> None:
            async with http.stream(
                "POST", "/v1/completions", json=body, headers=headers, extensions={"trace": trace}
            ) as response:
                async for _ in response.aiter_raw():
                    pass

        async with httpx.AsyncClient(base_url=gateway.url, timeout=120) as http:
            task = asyncio.create_task(call(http))
            if patience is None:
                await task
                return
            await sent_in_full.wait()
            done, _ = await asyncio.wait({task}, timeout=patience)
            if not done:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    await asyncio.gather(*(one(i) for i in range(sent)))

    def logged() -> list[str]:
        return [
            str(entry["request_id"])
            for entry in access_log(gateway)
            if str(entry["request_id"]).startswith("overload-")
        ]

    def settled() -> bool:
        return (
            gateway.metric("gateway_requests_total") == len(logged())
            and gateway.metric("gateway_requests_in_flight") == 0
            and queue_depth(gateway) == 0
            and gateway.metric("gateway_kv_tokens_reserved") == 0
        )

    assert await asyncio.to_thread(wait_until, settled, 60)
    ids = logged()
    assert len(ids) == len(set(ids)), "a request ended twice"
    assert set(ids) == {f"overload-{i}" for i in range(sent)}, "a request has no outcome"
    outcomes = {
        outcome: gateway.metric("gateway_requests_total", outcome=outcome)
        for outcome in ("completed", "rejected", "cancelled", "failed")
    }
    print(f"\noutcomes of {len(ids)} requests that reached the route ({sent} sent): {outcomes}")
    assert sum(outcomes.values()) == len(ids)
    assert outcomes["failed"] == 0
    assert outcomes["rejected"] > 0
    assert outcomes["cancelled"] > 0
    assert outcomes["completed"] > 0
    assert wait_until(lambda: engine_idle(idle_engine.metric), timeout=15)
