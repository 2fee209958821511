"""The shared-state benchmark (benchmarks/shared_state.py) against a real
redis-server: the simulated replicas run the gateway's own scripts, and what
it reports of each script is Redis's own count of it — every hold timed
alone one script call, every replica's heartbeat one."""

from benchmarks.shared_state import one_fleet
from deploy.local import ROOT
from tests.support.redis_server import RedisServer


def test_each_script_timed_alone_is_one_call_in_redis_statistics(redis: RedisServer) -> None:
    options = {
        "url": redis.url,
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
