"""Liveness and readiness (``app.api.health``), in-process: ready while at
least one engine answers."""

from tests.support.asgi import in_process_gateway
from tests.support.scripted_engine import ScriptedEngine


async def test_ready_while_one_engine_is_up() -> None:
    a, b = ScriptedEngine(), ScriptedEngine(reachable=False)
    async with in_process_gateway(fleet=(a, b)) as gateway:
        ready = await gateway.request("/health/ready", b"", method="GET").done()
        assert ready.status == 200
        assert ready.json()["engines_up"] == 1
