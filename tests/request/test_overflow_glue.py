"""A full queue gives a light tenant's request the place of the flood's
newest, through the whole flight, in-process against a scripted engine of
one sequence: the one pushed out gets one 429 in its API's shape with its
own ``Retry-After`` and counts once as ``rejected``/``queue_full``; the
light tenant's request waits in its place and is served
(``app.admission.overflow``)."""

from tests.support.asgi import in_process_gateway
from tests.support.scripted_engine import MODEL
from tests.support.wait import wait_for

COMPLETIONS = "/v1/completions"
BODY = {"model": MODEL, "prompt": "hi", "max_tokens": 4}
WHOLE = {
    "id": "x",
    "object": "text_completion",
    "choices": [],
    "usage": {"prompt_tokens": 2, "completion_tokens": 4, "total_tokens": 6},
}


async def test_a_light_tenant_takes_the_floods_newest_place_in_a_full_queue() -> None:
    async with in_process_gateway(max_concurrency=1, queue_max_depth=2) as gateway:
        running = gateway.request(COMPLETIONS, BODY, headers={"x-tenant-id": "heavy"})
        first = await gateway.engine.calls.get()
        flood = [
            gateway.request(COMPLETIONS, BODY, headers={"x-tenant-id": "heavy"}) for _ in range(2)
        ]
        assert await wait_for(lambda: gateway.metric("gateway_queue_depth") == 2, timeout=10)
        light = gateway.request(
            COMPLETIONS, {**BODY, "prompt": "light"}, headers={"x-tenant-id": "light"}
        )
        await flood[1].done()
        assert flood[1].status == 429
        assert flood[1].json()["error"]["code"] == "over_capacity"
        assert "gave its place" in flood[1].json()["error"]["message"]
        assert int(flood[1].headers["retry-after"]) >= 1
        assert gateway.metric("gateway_rejections_total", reason="queue_full") == 1
        assert gateway.metric("gateway_queue_depth") == 2
        # The engine serves one at a time: the light tenant's goes before the flood's.
        first.answer(200, WHOLE)
        await running.done()
        second = await gateway.engine.calls.get()
        assert second.body["prompt"] == "light"
        second.answer(200, WHOLE)
        third = await gateway.engine.calls.get()
        third.answer(200, WHOLE)
        await light.done()
        await flood[0].done()
        assert (running.status, light.status, flood[0].status) == (200, 200, 200)
        assert gateway.metric("gateway_requests_total", outcome="rejected") == 1
        assert gateway.metric("gateway_requests_total", outcome="completed") == 3
        assert await wait_for(gateway.settled, timeout=10)


async def test_the_floods_own_arrival_is_refused_in_a_full_queue() -> None:
    async with in_process_gateway(max_concurrency=1, queue_max_depth=2) as gateway:
        gateway.request(COMPLETIONS, BODY, headers={"x-tenant-id": "heavy"})
        await gateway.engine.calls.get()
        queued = [
            gateway.request(COMPLETIONS, BODY, headers={"x-tenant-id": "heavy"}) for _ in range(2)
        ]
        assert await wait_for(lambda: gateway.metric("gateway_queue_depth") == 2, timeout=10)
        more = gateway.request(COMPLETIONS, BODY, headers={"x-tenant-id": "heavy"})
        await more.done()
        assert more.status == 429
        assert "gave its place" not in more.json()["error"]["message"]
        assert not any(q.task.done() for q in queued)
