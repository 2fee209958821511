"""The shared-state benchmark (benchmarks/shared_state.py) against a real
redis-server: every admission it counts is one HOLD script call in Redis's
own statistics, whatever the fleet's size, so its server cost per call is
the script's."""

from benchmarks.shared_state import one_fleet
from tests.support.redis_server import RedisServer


async def test_every_hold_is_one_script_call_at_any_fleet_size(redis: RedisServer) -> None:
    for replicas in (1, 5):
        fleet = await one_fleet(redis.url, replicas, clients=4, seconds=0.3)
        assert fleet["holds"] > 0
        assert fleet["admitted"] == fleet["holds"]
        assert fleet["hold_calls"] == fleet["holds"]
        assert fleet["hold_usec_per_call"] > 0
