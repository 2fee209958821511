"""API keys against a real gateway and the real engine."""

import asyncio
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from openai import APIStatusError, AsyncOpenAI

from deploy.local import scrape
from tests.support.engines import MODEL, Engine
from tests.support.gateways import Gateway, access_log, running_gateway
from tests.support.keys import Entry, key_entry, keys_in, write_keys_file
from tests.support.wait import wait_for, wait_until

WINDOW = 10
TOKENS_PER_WINDOW = 3000


@pytest.fixture(scope="module")
def keys_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    entries = [
        key_entry("acme-1", "acme", "key-acme", priorities=("normal", "low")),
        key_entry("old", "acme", "key-revoked"),
        key_entry(
            "metered",
            "globex",
            "key-metered",
            tokens_per_minute=TOKENS_PER_WINDOW,
            requests_per_minute=1000,
        ),
    ]
    return write_keys_file(tmp_path_factory.mktemp("keys") / "keys.yaml", entries)


@pytest.fixture(scope="module")
def keyed(
    engine: Engine, keys_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    settings: dict[str, object] = {
        "keys_file": keys_path,
        "keys_reload_interval": 0.2,
        "rate_limit_window": WINDOW,
        "admission": "off",
    }
    with running_gateway(tmp_path_factory.mktemp("keyed"), engine.url, settings) as gateway:
        yield gateway


def edit(path: Path, change: Callable[[list[Entry]], list[Entry]]) -> None:
    write_keys_file(path, change(keys_in(path)))


def client(gateway: Gateway, key: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0, timeout=120)


def engine_requests(engine: Engine) -> float:
    return engine.metric("vllm:prompt_tokens_total")


async def test_missing_wrong_and_revoked_keys_never_reach_the_engine(
    idle_engine: Engine, keyed: Gateway, keys_path: Path
) -> None:
    before = engine_requests(idle_engine)
    for key in ("", "not-a-key", "key-acme-but-longer"):
        async with httpx.AsyncClient(base_url=keyed.url, timeout=30) as http:
            headers = {"authorization": f"Bearer {key}"} if key else {}
            reply = await http.post(
                "/v1/completions", json={"model": MODEL, "prompt": "x"}, headers=headers
            )
        assert reply.status_code == 401
        assert reply.json()["error"]["code"] == "invalid_api_key"
    # Revoke a key by removing it from the file: refused without a restart.
    async with client(keyed, "key-revoked") as api:
        await api.completions.create(model=MODEL, prompt="x", max_tokens=2)
    before = engine_requests(idle_engine)
    await asyncio.to_thread(
        edit, keys_path, lambda entries: [e for e in entries if e["id"] != "old"]
    )

    async def refused() -> bool:
        async with client(keyed, "key-revoked") as api:
            try:
                await api.completions.create(model=MODEL, prompt="x", max_tokens=2)
            except APIStatusError as error:
                return error.status_code == 401
        return False

    async def revoked() -> bool:
        """Refused, counting the engine's requests before the attempt: each
        attempt before the file was read again reached the engine."""
        nonlocal before
        before = engine_requests(idle_engine)
        return await refused()

    assert await wait_for(revoked, timeout=30, interval=0.1)
    assert await refused()
    assert engine_requests(idle_engine) == before


async def test_a_priority_the_key_may_not_use_is_403(keyed: Gateway) -> None:
    async with client(keyed, "key-acme") as api:
        with pytest.raises(APIStatusError) as caught:
            await api.completions.create(
                model=MODEL, prompt="x", max_tokens=2, extra_headers={"X-Priority": "high"}
            )
        assert caught.value.status_code == 403
        low = await api.completions.create(
            model=MODEL, prompt="x", max_tokens=2, extra_headers={"X-Priority": "low"}
        )
        assert low.usage is not None


async def test_a_key_added_to_the_file_works_without_a_restart(
    keyed: Gateway, keys_path: Path
) -> None:
    await asyncio.to_thread(
        edit, keys_path, lambda entries: [*entries, key_entry("new", "initech", "key-new")]
    )

    async def works() -> bool:
        async with client(keyed, "key-new") as api:
            try:
                await api.completions.create(model=MODEL, prompt="x", max_tokens=2)
            except APIStatusError:
                return False
        return True

    assert await wait_for(works, timeout=30, interval=0.1), "the new key was never accepted"


async def test_a_thousand_bogus_keys_are_a_thousand_401s_and_no_new_series(
    keyed: Gateway,
) -> None:
    before = keyed.metric("gateway_rejections_total", reason="unauthorized")
    series = {(s.name, tuple(sorted(s.labels.items()))) for s in scrape(keyed.url)}
    async with httpx.AsyncClient(base_url=keyed.url, timeout=60) as http:
        for start in range(0, 1000, 50):
            replies = await asyncio.gather(
                *(
                    http.post(
                        "/v1/completions",
                        json={"model": MODEL, "prompt": "x"},
                        headers={"authorization": f"Bearer bogus-{i}", "x-tenant-id": f"t{i}"},
                    )
                    for i in range(start, start + 50)
                )
            )
            assert {r.status_code for r in replies} == {401}
    assert keyed.metric("gateway_rejections_total", reason="unauthorized") == before + 1000
    after = {(s.name, tuple(sorted(s.labels.items()))) for s in scrape(keyed.url)}
    assert after == series


async def test_a_keys_tokens_never_exceed_its_limit_plus_one_worst_case(
    idle_engine: Engine, keyed: Gateway
) -> None:
    """Closed-loop streaming with natural lengths at a token limit: in every
    window, the tokens of the requests charged in it stay within the limit
    plus the largest worst case (each is charged between its estimate and
    its worst case: ``app.keys.quota``)."""
    rng = random.Random(5)

    async def user(api: AsyncOpenAI, until: float) -> None:
        loop = asyncio.get_running_loop()
        while loop.time() < until:
            try:
                stream = await api.chat.completions.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": f"Tell me about {rng.random()}"}],
                    max_tokens=rng.choice((100, 300, 500)),
                    stream=True,
                )
                async for _ in stream:
                    pass
            except APIStatusError as error:
                if error.status_code != 429:
                    raise
                await asyncio.sleep(float(error.response.headers["retry-after"]))

    async with client(keyed, "key-metered") as api:
        until = asyncio.get_running_loop().time() + 3 * WINDOW
        await asyncio.gather(*(user(api, until) for _ in range(4)))

    charges = [
        (fields["charged_ts"], fields["used_tokens"], fields["worst_tokens"])
        for fields in access_log(keyed)
        if fields.get("key_id") == "metered" and fields.get("charged_ts") is not None
    ]
    assert len(charges) >= 5
    largest = max(w for _, _, w in charges)
    window = WINDOW - 0.05
    worst = 0
    for start, _, _ in charges:
        used = sum(u for t, u, _ in charges if start <= t < start + window)
        worst = max(worst, used)
    print(
        f"\nmost tokens charged in one {WINDOW}s window: {worst} (limit {TOKENS_PER_WINDOW},"
        f" largest worst case {largest}, {len(charges)} requests)"
    )
    assert worst <= TOKENS_PER_WINDOW + largest
    assert wait_until(lambda: keyed.metric("gateway_requests_in_flight") == 0, timeout=30)
