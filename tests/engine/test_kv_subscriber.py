"""One engine's KV cache events kept in order (``app.engine.kv_subscriber``),
against a publisher in process that speaks vLLM's protocol: the index is
live only while it matches the engine's stream; what a subscriber missed —
joining late, a dropped batch, an engine restarted — comes from the replay;
without a replay the index starts afresh; while disconnected, not live."""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass

import pytest
import zmq.asyncio

from app.engine.kv_events import endpoint_for
from app.engine.kv_subscriber import KvEventSubscriber
from app.observe.metrics import GatewayMetrics
from app.routing.block_index import BlockIndex, PromptBlocks
from deploy.local import free_port
from tests.support.kv_publisher import ScriptedPublisher, removed, stored
from tests.support.wait import wait_for

IDS = tuple(range(1, 13))  # three blocks of four
PROMPT = PromptBlocks(IDS)
OTHER = PromptBlocks(tuple(range(50, 58)))  # two blocks


@dataclass
class Subscribed:
    publisher: ScriptedPublisher
    index: BlockIndex
    metrics: GatewayMetrics

    def metric(self, name: str) -> float:
        value = self.metrics.registry.get_sample_value(name, {"engine": "e"})
        return 0.0 if value is None else value

    async def holds(self, prompt: PromptBlocks, blocks: int) -> bool:
        """Wait until the index is live and finds ``blocks`` of ``prompt``."""

        async def check() -> bool:
            return self.index.live and self.index.leading(prompt) == blocks

        return await wait_for(check, timeout=20)


@asynccontextmanager
async def subscribed(
    replay: bool = True, before: Callable[[ScriptedPublisher], Awaitable[None]] | None = None
) -> AsyncIterator[Subscribed]:
    """A publisher and a subscriber to it; ``before`` publishes first."""
    publisher = ScriptedPublisher(free_port(), free_port())
    await publisher.start()
    if before is not None:
        await before(publisher)
    index, metrics = BlockIndex(), GatewayMetrics()
    context = zmq.asyncio.Context()
    subscriber = KvEventSubscriber(
        "e",
        publisher.endpoint,
        publisher.replay_endpoint if replay else None,
        index,
        metrics,
        context,
        replay_timeout=0.5,
    )
    task = asyncio.create_task(subscriber.run())
    try:
        yield Subscribed(publisher, index, metrics)
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        context.destroy(linger=0)
        await publisher.stop()
        publisher.close()


async def publish_prompt(publisher: ScriptedPublisher, deliver: bool = True) -> None:
    """The engine caches PROMPT's three blocks in two steps."""
    await publisher.publish(stored([901], None, list(IDS[:4])))
    await publisher.publish(stored([902, 903], 901, list(IDS[4:])), deliver=deliver)


async def until_live(sub: Subscribed) -> bool:
    async def check() -> bool:
        return sub.index.live

    return await wait_for(check, timeout=20)


async def test_events_in_sequence_keep_the_index_and_eviction_is_seen() -> None:
    async with subscribed() as sub:
        assert await until_live(sub)
        await publish_prompt(sub.publisher)
        assert await sub.holds(PROMPT, 3)
        assert sub.metric("gateway_kv_events_up") == 1
        await sub.publisher.publish(removed([902]))
        assert await sub.holds(PROMPT, 1)
        assert sub.metric("gateway_kv_event_gaps_total") == 0


async def test_a_subscriber_that_joins_late_learns_from_the_replay_what_was_cached() -> None:
    async with subscribed(before=publish_prompt) as sub:
        assert await sub.holds(PROMPT, 3)


async def test_a_dropped_batch_is_a_gap_filled_from_the_replay() -> None:
    async with subscribed() as sub:
        assert await until_live(sub)
        await publish_prompt(sub.publisher, deliver=False)
        assert await wait_for(lambda: sub.index.leading(PROMPT) == 1, timeout=20)
        # The next batch shows the gap; the replay brings the missed one.
        await sub.publisher.publish(stored([904, 905], None, list(OTHER.ids)))
        assert await sub.holds(PROMPT, 3)
        assert await sub.holds(OTHER, 2)
        assert sub.metric("gateway_kv_event_gaps_total") == 1


async def test_a_restarted_engine_is_seen_and_what_it_held_is_forgotten() -> None:
    async with subscribed() as sub:
        assert await until_live(sub)
        await publish_prompt(sub.publisher)
        assert await sub.holds(PROMPT, 3)
        await sub.publisher.stop()
        # Disconnected: not live (routing falls back), nothing forgotten yet.
        assert await wait_for(lambda: not sub.index.live, timeout=20)
        assert sub.metric("gateway_kv_events_up") == 0
        # Back with an empty cache and its sequence from 0, before the
        # subscriber reconnects: two batches, as many as before.
        await sub.publisher.start()
        await sub.publisher.publish(stored([777], None, [9, 9, 9, 9]))
        await sub.publisher.publish(stored([904, 905], None, list(OTHER.ids)))
        assert await sub.holds(OTHER, 2)
        assert sub.index.leading(PROMPT) == 0


async def test_without_a_replay_a_gap_starts_the_index_afresh() -> None:
    """Nothing can be filled: what was known may have been evicted unseen,
    so it is dropped rather than trusted."""
    async with subscribed(replay=False) as sub:
        assert await until_live(sub)
        await publish_prompt(sub.publisher, deliver=False)
        assert await wait_for(lambda: sub.index.leading(PROMPT) == 1, timeout=20)
        await sub.publisher.publish(stored([904, 905], None, list(OTHER.ids)))
        assert await sub.holds(OTHER, 2)
        assert sub.index.leading(PROMPT) == 0
        assert sub.metric("gateway_kv_event_gaps_total") == 1


async def test_a_replay_that_does_not_answer_leaves_the_index_not_live(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Connected, but the replay socket does not answer (an engine started
    without one): the gap cannot be filled, so what the engine holds is not
    known — not live — until a sync succeeds."""
    async with subscribed() as sub:
        assert await until_live(sub)
        router = sub.publisher._router
        assert router is not None
        router.close(linger=0)
        sub.publisher._router = None
        await publish_prompt(sub.publisher, deliver=False)
        await sub.publisher.publish(stored([904, 905], None, list(OTHER.ids)))
        assert await wait_for(lambda: "no KV event replay" in caplog.text, timeout=20)
        assert not sub.index.live
        assert sub.metric("gateway_kv_events_up") == 0


@pytest.mark.parametrize(
    ("template", "url", "endpoint"),
    [
        ("tcp://{host}:5557", "http://10.0.0.7:8000", "tcp://10.0.0.7:5557"),
        ("tcp://{host}:{port+100}", "http://127.0.0.1:8001", "tcp://127.0.0.1:8101"),
        ("tcp://{host}:{port-1}", "https://[fd00::1]", "tcp://[fd00::1]:442"),
        ("tcp://events.example:5557", "http://10.0.0.7:8000", "tcp://events.example:5557"),
    ],
)
def test_an_engines_endpoint_is_found_beside_its_url(
    template: str, url: str, endpoint: str
) -> None:
    assert endpoint_for(template, url) == endpoint


@pytest.mark.parametrize("template", ["{host}:5557", "tcp://{hostname}:1", "tcp://{host}:{port*2}"])
def test_an_endpoint_template_that_makes_no_endpoint_is_refused(template: str) -> None:
    with pytest.raises(ValueError, match="KV events endpoint"):
        endpoint_for(template, "http://127.0.0.1:8000")
