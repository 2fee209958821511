"""The Batch API against the real engine, the ``openai`` SDK as the client:
upload, create, poll to the end, download the output and error files; a
file that is not a batch failing at ``validating``; cancel mid-run; the
window passing (``expired``); another tenant's ids; limits refused before
anything is stored; pagination."""

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Final

import openai
import pytest
from openai import AsyncOpenAI
from openai.types import Batch

from tests.support.engines import MODEL, Engine, engine_idle
from tests.support.gateways import Gateway, StartGateway, access_log
from tests.support.keys import key_entry, write_keys_file
from tests.support.wait import wait_until

ENDPOINT: Final = "/v1/completions"
ENDS = ("completed", "failed", "expired", "cancelled")


def line(custom_id: str, body: dict[str, Any], url: str = ENDPOINT) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(item) + "\n" for item in lines).encode()


def completion(prompt: str, max_tokens: int = 8, **more: Any) -> dict[str, Any]:
    # ignore_eos: the tiny model may end an answer early, and the counts are asserted.
    return {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True, **more}


@pytest.fixture
def gateway_with_batches(
    idle_engine: Engine, start_gateway: StartGateway, tmp_path: Path
) -> Callable[..., Gateway]:
    def start(**settings: object) -> Gateway:
        gateway = start_gateway(idle_engine.url, batch_dir=tmp_path / "batches", **settings)
        gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)
        return gateway

    return start


@pytest.fixture
async def clients(gateway_with_batches: Callable[..., Gateway]) -> AsyncIterator[Any]:
    gateway = gateway_with_batches()
    async with (
        AsyncOpenAI(
            base_url=f"{gateway.url}/v1", api_key="-", default_headers={"X-Tenant-Id": "a"}
        ) as a,
        AsyncOpenAI(
            base_url=f"{gateway.url}/v1", api_key="-", default_headers={"X-Tenant-Id": "b"}
        ) as b,
    ):
        yield a, b


async def until(
    client: AsyncOpenAI, batch_id: str, ok: Callable[[Batch], bool], timeout: float = 240
) -> Batch:
    """Poll the batch until ``ok`` says so."""
    async with asyncio.timeout(timeout):
        while True:
            batch = await client.batches.retrieve(batch_id)
            if ok(batch):
                return batch
            await asyncio.sleep(0.2)


async def finished(client: AsyncOpenAI, batch_id: str) -> Batch:
    return await until(client, batch_id, lambda batch: batch.status in ENDS)


async def read_file(client: AsyncOpenAI, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    content = await client.files.content(file_id)
    return [json.loads(x) for x in content.text.splitlines()]


async def killed_mid_batch(
    gateway: Gateway, engine: Engine, lines: list[dict[str, Any]], completed: int
) -> str:
    """A batch of ``lines`` made on ``gateway``, which is killed with SIGKILL
    (its process group) once ``completed`` lines are done, with two in flight
    that cannot have finished; the batch's id.

    The engine is stopped (SIGSTOP) around the kill: lines of one length run
    in step, so without it both could finish in the moment between reading
    the gauge and the kill, and nothing would be left to run again."""
    async with AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="-") as client:
        uploaded = await client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
        batch = await client.batches.create(
            input_file_id=uploaded.id, endpoint=ENDPOINT, completion_window="24h"
        )
        await until(
            client,
            batch.id,
            lambda b: b.request_counts is not None and b.request_counts.completed >= completed,
        )
    os.killpg(engine.process.pid, signal.SIGSTOP)
    try:
        assert await asyncio.to_thread(wait_until, lambda: stuck(gateway), timeout=30)
        os.killpg(gateway.process.pid, signal.SIGKILL)
        gateway.process.proc.wait(timeout=30)
    finally:
        os.killpg(engine.process.pid, signal.SIGCONT)
    return batch.id


def stuck(gateway: Gateway) -> bool:
    """Two lines in flight and none finishing over a moment: with the engine
    stopped, what it had answered before is recorded and the lines claimed
    since wait on it."""
    before = gateway.metric("gateway_batch_lines_total", outcome="completed")
    if gateway.metric("gateway_batch_lines_in_flight") != 2:
        return False
    time.sleep(0.2)
    return (
        gateway.metric("gateway_batch_lines_in_flight") == 2
        and gateway.metric("gateway_batch_lines_total", outcome="completed") == before
    )


async def test_a_batch_runs_to_its_output_and_error_files(clients: Any) -> None:
    a, b = clients
    lines = [line(f"ok-{i}", completion(f"Batch line {i}")) for i in range(5)]
    # The route refuses this body (max_tokens below 1): it ends in the error file.
    lines.insert(2, line("refused", completion("Bad", max_tokens=0)))
    uploaded = await a.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
    assert (uploaded.purpose, uploaded.bytes) == ("batch", len(jsonl(lines)))
    batch = await a.batches.create(
        input_file_id=uploaded.id,
        endpoint=ENDPOINT,
        completion_window="24h",
        metadata={"run": "e2e"},
    )
    assert batch.status == "validating"
    done = await finished(a, batch.id)
    assert done.status == "completed"
    assert done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed) == (6, 5)
    assert done.request_counts.failed == 1
    assert done.metadata == {"run": "e2e"}
    assert done.usage is not None
    assert done.usage.output_tokens == 5 * 8
    output = await read_file(a, done.output_file_id)
    assert sorted(o["custom_id"] for o in output) == [f"ok-{i}" for i in range(5)]
    for result in output:
        assert result["response"]["status_code"] == 200
        assert result["response"]["body"]["usage"]["completion_tokens"] == 8
    (error,) = await read_file(a, done.error_file_id)
    assert error["custom_id"] == "refused"
    assert error["response"]["status_code"] == 400
    assert "max_tokens" in json.dumps(error["response"]["body"])

    # Another tenant's file and batch do not exist to it.
    with pytest.raises(openai.NotFoundError):
        await b.files.retrieve(uploaded.id)
    with pytest.raises(openai.NotFoundError):
        await b.batches.retrieve(batch.id)
    with pytest.raises(openai.NotFoundError):
        await b.batches.create(
            input_file_id=uploaded.id, endpoint=ENDPOINT, completion_window="24h"
        )
    assert (await b.batches.list()).data == []

    # Pagination: the input, output and error files, newest first.
    first = await a.files.list(limit=2)
    assert len(first.data) == 2
    assert first.has_more
    rest = await a.files.list(limit=2, after=first.data[-1].id)
    ids = [f.id for f in [*first.data, *rest.data]]
    assert set(ids) == {uploaded.id, done.output_file_id, done.error_file_id}
    assert not rest.has_more

    # A file deleted is gone.
    deleted = await a.files.delete(uploaded.id)
    assert deleted.deleted
    with pytest.raises(openai.NotFoundError):
        await a.files.retrieve(uploaded.id)


async def test_a_file_that_is_not_a_batch_fails_at_validating(clients: Any) -> None:
    a, _ = clients
    raw = b"not json\n" + jsonl(
        [
            line("x", completion("One")),
            line("x", completion("Two")),
            line("y", completion("Three"), url="/v1/chat/completions"),
        ]
    )
    uploaded = await a.files.create(file=("bad.jsonl", raw), purpose="batch")
    batch = await a.batches.create(
        input_file_id=uploaded.id, endpoint=ENDPOINT, completion_window="24h"
    )
    done = await finished(a, batch.id)
    assert done.status == "failed"
    assert done.errors is not None
    named = {(e.line, e.code) for e in done.errors.data or []}
    assert named == {(1, "invalid_json_line"), (3, "duplicate_custom_id"), (4, "invalid_url")}
    assert done.output_file_id is None


async def test_a_batch_cancelled_mid_run_finishes_what_runs_and_starts_nothing_more(
    gateway_with_batches: Callable[..., Gateway],
) -> None:
    gateway = gateway_with_batches(batch_concurrency=1)
    async with AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="-") as client:
        lines = [line(f"l{i}", completion(f"Long {i}", 64, ignore_eos=True)) for i in range(20)]
        uploaded = await client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
        batch = await client.batches.create(
            input_file_id=uploaded.id, endpoint=ENDPOINT, completion_window="24h"
        )
        await until(client, batch.id, lambda batch: batch.status == "in_progress")
        cancelling = await client.batches.cancel(batch.id)
        assert cancelling.status == "cancelling"
        done = await finished(client, batch.id)
    assert done.status == "cancelled"
    assert done.request_counts is not None
    assert done.request_counts.total == 20
    assert done.request_counts.completed < 20
    assert done.request_counts.failed == 0


async def test_a_batch_whose_window_passes_expires_with_what_did_not_run(
    gateway_with_batches: Callable[..., Gateway],
) -> None:
    gateway = gateway_with_batches(batch_concurrency=1, batch_completion_window=3)
    async with AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="-") as client:
        lines = [line(f"l{i}", completion(f"Long {i}", 256, ignore_eos=True)) for i in range(30)]
        uploaded = await client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
        batch = await client.batches.create(
            input_file_id=uploaded.id, endpoint=ENDPOINT, completion_window="24h"
        )
        done = await finished(client, batch.id)
        assert done.status == "expired"
        expired = await read_file(client, done.error_file_id)
    assert expired
    assert all(e["error"]["code"] == "batch_expired" for e in expired)
    assert done.request_counts is not None
    assert done.request_counts.completed + len(expired) == 30


async def test_limits_are_refused_before_anything_is_stored(
    gateway_with_batches: Callable[..., Gateway], tmp_path: Path
) -> None:
    gateway = gateway_with_batches(batch_max_file_bytes=2000, batch_max_lines=3)
    async with AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="-") as client:
        big = jsonl([line(f"l{i}", completion("x" * 400)) for i in range(6)])
        with pytest.raises(openai.APIStatusError) as too_big:
            await client.files.create(file=("big.jsonl", big), purpose="batch")
        assert too_big.value.status_code == 413
        many = jsonl([line(f"l{i}", completion("x")) for i in range(4)])
        with pytest.raises(openai.BadRequestError, match="more than 3 lines"):
            await client.files.create(file=("many.jsonl", many), purpose="batch")
        with pytest.raises(openai.BadRequestError, match="purpose"):
            await client.files.create(file=("a.jsonl", many), purpose="fine-tune")
        assert (await client.files.list()).data == []
    assert list((tmp_path / "batches" / "files").iterdir()) == []


async def test_a_gateway_killed_mid_batch_and_started_again_loses_no_line(
    idle_engine: Engine, start_gateway: StartGateway, tmp_path: Path
) -> None:
    settings: dict[str, object] = {"batch_dir": tmp_path / "batches", "batch_concurrency": 2}
    first = start_gateway(idle_engine.url, **settings)
    first.process.wait_http(f"{first.url}/health/ready", timeout=60)
    succeeded = idle_engine.metric("vllm:request_success_total")
    lines = [line(f"l{i}", completion(f"Kept {i}", 48, ignore_eos=True)) for i in range(16)]
    batch_id = await killed_mid_batch(first, idle_engine, lines, completed=3)

    again = start_gateway(idle_engine.url, **settings)
    again.process.wait_http(f"{again.url}/health/ready", timeout=60)
    async with AsyncOpenAI(base_url=f"{again.url}/v1", api_key="-") as client:
        done = await finished(client, batch_id)
        output = await read_file(client, done.output_file_id)
    assert done.status == "completed"
    assert sorted(o["custom_id"] for o in output) == sorted(f"l{i}" for i in range(16))
    assert all(o["response"]["status_code"] == 200 for o in output)
    sent_twice = done.model_extra["lines_sent_more_than_once"] if done.model_extra else None
    assert sent_twice == sum(1 for o in output if o["attempts"] > 1)
    assert sent_twice == 2  # the two lines in flight when the gateway died
    # What the engine finished: every line once, and those sent twice at most twice.
    assert await asyncio.to_thread(wait_until, lambda: engine_idle(idle_engine.metric), timeout=60)
    ran = idle_engine.metric("vllm:request_success_total") - succeeded
    assert 16 <= ran <= 16 + sent_twice


async def test_a_keys_batch_runs_as_its_key_and_waits_out_its_rate_limit(
    idle_engine: Engine, start_gateway: StartGateway, tmp_path: Path
) -> None:
    """Its lines are the key's requests (its tenant, its limits): refused
    for the key's rate, a line waits and runs again rather than failing."""
    keys = write_keys_file(
        tmp_path / "keys.yaml",
        [
            key_entry("batcher", "acme", "sk-batcher", requests_per_minute=2),
            key_entry("other", "rival", "sk-other"),
        ],
    )
    gateway = start_gateway(
        idle_engine.url, batch_dir=tmp_path / "batches", keys_file=keys, rate_limit_window=2
    )
    gateway.process.wait_http(f"{gateway.url}/health/ready", timeout=60)
    lines = [line(f"l{i}", completion(f"Keyed {i}")) for i in range(5)]
    async with (
        AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="sk-batcher") as client,
        AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key="sk-other") as rival,
    ):
        uploaded = await client.files.create(file=("in.jsonl", jsonl(lines)), purpose="batch")
        batch = await client.batches.create(
            input_file_id=uploaded.id, endpoint=ENDPOINT, completion_window="24h"
        )
        with pytest.raises(openai.NotFoundError):
            await rival.batches.retrieve(batch.id)
        done = await finished(client, batch.id)
    assert done.status == "completed"
    assert done.request_counts is not None
    assert done.request_counts.completed == 5
    ran = [e for e in access_log(gateway) if e.get("route") == "completions"]
    assert {(e["key_id"], e["tenant"]) for e in ran} == {("batcher", "acme")}
    assert {e["outcome"] for e in ran} == {"completed", "rejected"}
    assert {e["reason"] for e in ran if e["outcome"] == "rejected"} == {"rate_limited"}
    assert gateway.metric("gateway_batch_lines_total", outcome="retried") >= 1
