"""What each listener serves when the admin port is set (``app.api.ports``),
in-process: ``/metrics`` only on the admin port, health on both, the API on
the main port."""

from tests.support.asgi import in_process_gateway


async def test_metrics_only_on_the_admin_port_health_on_both() -> None:
    async with in_process_gateway(admin_port=9100) as gateway:

        async def get(path: str, port: int) -> int | None:
            exchange = gateway.request(path, b"", method="GET", port=port)
            return (await exchange.done()).status

        assert await get("/metrics", 8000) == 404
        assert await get("/metrics", 9100) == 200
        assert await get("/health/live", 8000) == 200
        assert await get("/health/live", 9100) == 200
        assert await get("/v1/models", 9100) == 404
        assert await get("/v1/models", 8000) == 200
