"""Load for the live test's fleet and tenant panels, with one real engine.

- A keyed gateway: a tenant refused for a missing or wrong key, a priority its
  key may not use, and its token limit.
- Two engines for the gateway: the one engine under two names (its address
  and ``localhost``), so routing has a choice to make — prefix affinity and
  its load cap — while one engine runs on this machine.
- The engine stalled (SIGSTOP, then SIGCONT): a request fails on it before
  any byte reached the client and is retried under its other name; every
  gateway ejects it and readmits it once it answers again.
"""

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import httpx

from app.engine.monitor import engine_label
from deploy.local import scrape
from tests.support.engines import MODEL, Engine, engine_idle
from tests.support.gateways import Gateway
from tests.support.keys import new_key, write_keys_file
from tests.support.wait import wait_until

TENANT = "acme"
TOKENS_PER_WINDOW = 200
# Requests that share their first 2,048 characters share a routing key.
DOCUMENT = " ".join(
    f"Clause {i}: the gateway keeps every engine on the graceful side of the knee."
    for i in range(40)
)


def write_tenant_keys_file(path: Path) -> str:
    """A keys file with one key for ``TENANT``, normal priority only, a small
    token limit; returns the key."""
    key, entry = new_key(f"{TENANT}-live", TENANT, tokens_per_minute=TOKENS_PER_WINDOW)
    write_keys_file(path, [entry])
    return key


def engine_names(engine: Engine) -> list[str]:
    """The engine's URL and the same engine by the name ``localhost``."""
    port = engine.url.rsplit(":", 1)[1]
    return [engine.url, f"http://localhost:{port}"]


async def tenant_at_its_limit(keyed: Gateway, key: str) -> None:
    body = {"model": MODEL, "max_tokens": 40, "ignore_eos": True}
    auth = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=keyed.url, timeout=120) as http:
        missing = await http.post("/v1/completions", json={**body, "prompt": "No key"})
        assert missing.status_code == 401
        wrong = await http.post(
            "/v1/completions",
            json={**body, "prompt": "Wrong key"},
            headers={"Authorization": "Bearer vgw-not-a-key"},
        )
        assert wrong.status_code == 401
        high = await http.post(
            "/v1/completions",
            json={**body, "prompt": "High"},
            headers={**auth, "X-Priority": "high"},
        )
        assert high.status_code == 403
        statuses = []
        # Each request holds about 45 tokens of the 200: the fifth cannot fit.
        for i in range(10):
            answer = await http.post(
                "/v1/completions", json={**body, "prompt": f"Question {i}"}, headers=auth
            )
            statuses.append(answer.status_code)
            if answer.status_code == 429:
                assert answer.json()["error"]["code"] == "rate_limit_exceeded"
                break
        assert statuses[0] == 200, statuses
        assert statuses[-1] == 429, statuses


async def prefix_routing(fleet: Gateway) -> None:
    """Bursts of requests that share a document: they go to the engine their
    prefix prefers until it is loaded past the cap (five of seven in flight
    on one of two engines), then to the other. Requests decided together see
    each other, so a burst overrides unless its first requests end before
    its last arrive; a few bursts make that certain."""
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 256, "ignore_eos": True}
    async with httpx.AsyncClient(base_url=fleet.url, timeout=300) as http:

        async def ask(i: int) -> None:
            answer = await http.post(
                "/v1/completions", json={**body, "prompt": f"{DOCUMENT} Question {i}:"}
            )
            assert answer.status_code == 200, answer.text

        for _ in range(5):
            await asyncio.gather(*(ask(i) for i in range(7)))
            if fleet.metric("gateway_routing_load_cap_overrides_total") > 0:
                break
    assert fleet.metric("gateway_routing_affinity_hits_total") > 0
    assert fleet.metric("gateway_routing_load_cap_overrides_total") > 0


async def engine_stall(engine: Engine, failover: Gateway, gateways: list[Gateway]) -> None:
    """The engine's server stops (SIGSTOP) while ``failover`` still counts it
    up under both names: its read timeout (2 s) is far below its health
    check's (10 s), so a request times out on one name, is retried under the
    other, and times out there; then the health checks eject both. SIGCONT
    brings the engine back and every gateway readmits it."""
    assert await asyncio.to_thread(wait_until, lambda: engine_idle(engine.metric), 120)
    labels = [engine_label(url) for url in engine_names(engine)]

    def ejected() -> bool:
        return all(
            failover.metric("gateway_engine_ejections_total", engine=label) >= 1 for label in labels
        )

    os.kill(engine.process.pid, signal.SIGSTOP)
    try:
        async with httpx.AsyncClient(base_url=failover.url, timeout=60) as http:
            stalled = await http.post(
                "/v1/completions",
                json={"model": MODEL, "prompt": "Stalled", "max_tokens": 8, "stream": True},
            )
        assert stalled.status_code == 504, stalled.text
        assert await asyncio.to_thread(wait_until, ejected, 60)
    finally:
        os.kill(engine.process.pid, signal.SIGCONT)
    assert failover.metric("gateway_engine_retries_total") == 1
    assert await asyncio.to_thread(wait_until, lambda: all(map(every_engine_up, gateways)), 60)


def every_engine_up(gateway: Gateway) -> bool:
    up = [s.value for s in scrape(gateway.url) if s.name == "gateway_upstream_up"]
    return bool(up) and all(value == 1 for value in up)
