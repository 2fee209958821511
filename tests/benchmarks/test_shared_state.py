"""The shared-state benchmark (benchmarks/shared_state.py) against a real
redis-server: the simulated replicas run the gateway's own scripts, and what
it reports of each script is Redis's own count of it — every hold timed
alone one script call, every replica's heartbeat one; on a real Redis Cluster,
each hold two calls, counted on the shards that ran them."""

from benchmarks.shared_state import one_fleet
from deploy.local import ROOT
from tests.support.redis_cluster import RedisClusterNodes
from tests.support.redis_server import RedisServer

OPTIONS = {
    "replicas": 3,
    "engines": 2,
    "rate": 40.0,
    "lease": 5.0,
    "hold_seconds": 0.2,
    "tenants": 4,
    "tokens": 100,
    "warmup": 0.3,
    "seconds": 0.7,
    "isolated_holds": 25,
    "idle_seconds": 0.2,
}


def test_each_script_timed_alone_is_one_call_in_redis_statistics(redis: RedisServer) -> None:
    options = {**OPTIONS, "url": redis.url}
    fleet = one_fleet(str(ROOT), options)
    assert fleet["admissions"] > 0
    assert fleet["refused"] == 0
    assert fleet["hold_rtt_p99_ms"] is not None
    assert fleet["ping_rtt_p99_ms"] is not None
    # Every admission of the window ran its script in the window, but for a
    # hold already on its way when Redis's statistics were reset: at most
    # one a replica (each holds one request at a time).
    assert fleet["scripts_under_load"]["calls"] >= fleet["admissions"] - options["replicas"]
    assert fleet["server_cpu_s"] > 0
    assert fleet["hold_alone"]["calls"] == 25
    assert fleet["heartbeat_alone"]["calls"] == 3
    assert fleet["hold_alone"]["usec_per_call"] > 0


def test_on_a_cluster_each_hold_is_two_calls_counted_where_they_ran(
    redis_cluster: RedisClusterNodes,
) -> None:
    redis_cluster.flush()
    fleet = one_fleet(str(ROOT), {**OPTIONS, "url": redis_cluster.url, "cluster": True})
    assert fleet["admissions"] > 0
    alone = fleet["hold_alone"]
    assert alone["per"] == 25
    # TURN on {gw}'s shard and PLACE on the engine's: 50 calls over the
    # three primaries, the fair order's among them.
    assert sum(p["calls"] for p in alone["primaries"]) == 50
    assert len(alone["primaries"]) == 3
    assert any("{gw}" in p["serves"] for p in alone["primaries"])
    assert fleet["busiest_shard"]
