"""Batches across two gateways sharing a real Redis and one batch directory:
a batch made on one is seen and run by both, and when the one running it is
killed with SIGKILL mid-batch, the other takes its lines over once their
leases run out — every line one result, none lost, the lines sent twice
counted."""

from pathlib import Path

from openai import AsyncOpenAI

from tests.e2e.test_batches import (
    ENDPOINT,
    completion,
    finished,
    jsonl,
    killed_mid_batch,
    line,
    read_file,
)
from tests.support.engines import Engine
from tests.support.gateways import Gateway, StartGateway
from tests.support.redis_server import RedisServer

LINES = 16


def shared_gateway(
    start_gateway: StartGateway, engine: Engine, redis: RedisServer, directory: Path
) -> Gateway:
    gateway = start_gateway(
        engine.url,
        redis_url=redis.url,
        # Short leases: a dead gateway's lines go back within seconds.
        redis_lease_seconds=2,
        batch_dir=directory,
        batch_concurrency=2,
    )
    gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)
    return gateway


async def test_a_batch_survives_the_gateway_running_it_killed_while_another_shares_it(
    idle_engine: Engine, start_gateway: StartGateway, redis: RedisServer, tmp_path: Path
) -> None:
    directory = tmp_path / "shared-batches"
    first = shared_gateway(start_gateway, idle_engine, redis, directory)
    lines = [line(f"l{i}", completion(f"Shared {i}", 48, ignore_eos=True)) for i in range(LINES)]
    batch_id = await killed_mid_batch(first, idle_engine, lines, completed=2)

    # Started after the kill: it finds the batch in Redis and the file on the volume.
    second = shared_gateway(start_gateway, idle_engine, redis, directory)
    async with AsyncOpenAI(base_url=f"{second.url}/v1", api_key="-") as client:
        done = await finished(client, batch_id)
        output = await read_file(client, done.output_file_id)
        assert (await client.files.retrieve(done.input_file_id)).id == done.input_file_id
    assert done.status == "completed"
    assert sorted(o["custom_id"] for o in output) == sorted(f"l{i}" for i in range(LINES))
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (LINES, 0)
    sent_twice = (done.model_extra or {})["lines_sent_more_than_once"]
    assert sent_twice == sum(1 for o in output if o["attempts"] > 1)
    assert sent_twice == 2  # the two lines the killed gateway had in flight


async def test_two_gateways_on_one_redis_share_a_batchs_lines(
    idle_engine: Engine, start_gateway: StartGateway, redis: RedisServer, tmp_path: Path
) -> None:
    directory = tmp_path / "shared-batches"
    gateways = [shared_gateway(start_gateway, idle_engine, redis, directory) for _ in range(2)]
    lines = [line(f"l{i}", completion(f"Both {i}", 64, ignore_eos=True)) for i in range(LINES)]
    async with AsyncOpenAI(base_url=f"{gateways[0].url}/v1", api_key="-") as client:
        uploaded = await client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
        batch = await client.batches.create(
            input_file_id=uploaded.id, endpoint=ENDPOINT, completion_window="24h"
        )
    async with AsyncOpenAI(base_url=f"{gateways[1].url}/v1", api_key="-") as other:
        done = await finished(other, batch.id)
        output = await read_file(other, done.output_file_id)
    assert done.status == "completed"
    assert len(output) == LINES
    assert (done.model_extra or {})["lines_sent_more_than_once"] == 0
    # Both ran some: their lines counted on each.
    ran = [g.metric("gateway_batch_lines_total", outcome="completed") for g in gateways]
    assert sum(ran) == LINES
    assert all(r > 0 for r in ran)
