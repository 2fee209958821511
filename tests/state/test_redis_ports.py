"""The tests' own redis-server (``tests.support.redis_server``): a port
picked free can be taken before the server binds it; the server then exits
while the other answers there, and a start must not take that one for it."""

from pathlib import Path

import redis as redis_client

from deploy.local import free_port
from tests.support.redis_server import RedisServer


def test_a_server_whose_port_was_taken_starts_on_another(
    redis: RedisServer, tmp_path: Path
) -> None:
    """Its first pick is the port another server already serves: the start
    picks again, and what answers on its port is its own process."""
    picks = iter([redis.port, free_port()])
    second = RedisServer(tmp_path / "second", pick_port=lambda: next(picks))
    (tmp_path / "second").mkdir()
    try:
        second.start()
        assert second.port != redis.port
        assert second.process is not None
        with redis_client.Redis.from_url(second.url) as client:
            assert int(client.info("server")["process_id"]) == second.process.pid
    finally:
        second.stop()
