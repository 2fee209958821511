"""Two gateway replicas, in-process, sharing state through a real Redis in
front of one scripted engine: one budget for the engine, not one each."""

from app.admission.controller import AdmissionController
from tests.support.asgi import InProcessGateway, in_process_gateway
from tests.support.redis_server import RedisServer
from tests.support.scripted_engine import DONE, MODEL, ScriptedEngine, chunk
from tests.support.wait import wait_for

BODY = {"model": MODEL, "prompt": "hello", "max_tokens": 100, "stream": True}


def count_heartbeats(gateway: InProcessGateway) -> list[int]:
    """A counter (in a list) of the heartbeats that bring the replica the
    fleet's holdings; each is followed by a dispatch round."""
    controller = gateway.services.admission
    assert isinstance(controller, AdmissionController)
    assert controller.shared is not None
    beats = [0]

    def seen() -> None:
        beats[0] += 1

    controller.shared.on_view(seen)
    return beats


async def test_a_burst_split_over_two_replicas_stays_within_one_budget(redis: RedisServer) -> None:
    # 24 blocks of 16 tokens; each request asks for 7 blocks: 3 fit.
    engine = ScriptedEngine(kv_blocks=24, block_size=16)
    async with (
        in_process_gateway(
            engine, redis_url=redis.url, redis_timeout=10, queue_timeout=60
        ) as first,
        in_process_gateway(
            engine, redis_url=redis.url, redis_timeout=10, queue_timeout=60
        ) as second,
    ):
        exchanges = [
            gw.request("/v1/completions", BODY) for gw in (first, second) for _ in range(6)
        ]
        calls = [await engine.calls.get() for _ in range(3)]
        replicas = (first, second)

        def total(name: str) -> float:
            return sum(gw.metric(name) for gw in replicas)

        async def all_twelve_placed() -> bool:
            return total("gateway_queue_depth") + total("gateway_requests_in_flight") == 12

        assert await wait_for(all_twelve_placed, timeout=30)
        # Each replica looks at the fleet again while its queue waits: past
        # a few heartbeats on each, with dispatch rounds made after them on
        # the fleet's fresh totals, no fourth request has been admitted.
        heartbeats = [count_heartbeats(gw) for gw in replicas]

        async def a_few_heartbeats_later() -> bool:
            return all(beats[0] >= 3 for beats in heartbeats)

        assert await wait_for(a_few_heartbeats_later, timeout=30)
        assert total("gateway_queue_depth") == 9
        assert total("gateway_requests_in_flight") == 3
        assert engine.calls.empty()
        fleet = first.metric("gateway_fleet_kv_tokens_reserved")
        assert fleet == 3 * 7 * 16
        for call in calls:
            call.stream()
            call.send(chunk("a") + DONE)
            call.end()
        # As holds end, the queued ones are admitted, three at a time.
        served = 3
        while served < 12:
            batch = [await engine.calls.get()]
            while not engine.calls.empty():
                batch.append(engine.calls.get_nowait())
            assert len(batch) <= 3
            for call in batch:
                call.stream()
                call.send(chunk("a") + DONE)
                call.end()
            served += len(batch)
        for exchange in exchanges:
            await exchange.done()
        assert first.settled()
        assert second.settled()
