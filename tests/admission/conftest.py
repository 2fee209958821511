"""A real redis-server for the admission tests that share state."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.redis_server import RedisServer


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    server = RedisServer(tmp_path)
    server.start()
    yield server.url
    server.stop()
