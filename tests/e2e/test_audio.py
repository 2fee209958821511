"""Transcriptions and translations through the gateway against a real
engine: a tiny random-weight Whisper (``deploy/model/build_tiny_whisper.py``;
``make setup`` builds it and installs the engine's audio packages), served by
vLLM's CPU build. Its words are noise; what is checked is the request's
path: the form relayed, the answer and its usage, the key's charge, the
windows reserved against those the engine runs, and a client's leaving.

This module starts an engine of its own (another model from the session
engine's): 64 blocks of 128 tokens, where one window of audio holds 1,500
encoder positions and up to 448 decoder tokens (16 blocks), and vLLM's
development routes (``/pause``, ``/resume``) to hold a stream still while
its client leaves."""

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import httpx
import openai
import pytest

from deploy.local import ROOT
from tests.support.audio import audio_form, wav
from tests.support.disconnects import cancels, leave_while_queued_and_running, ran_to_the_end
from tests.support.engines import Engine, engine_idle, running_engine
from tests.support.gateways import Gateway, access_line, running_gateway
from tests.support.keys import key_entry, write_keys_file
from tests.support.pooling import KEY, one_at_a_time
from tests.support.wait import wait_for, wait_until

WHISPER = "whisper"
MODEL_DIR = ROOT / ".models" / "tiny-whisper"
# One window's encoder positions, and Whisper's decoder prompt (start of
# transcript, language, task, no timestamps) as the gateway estimates it.
ENCODER = 1500
DECODER_PROMPT = 4
# What the engine logs as it takes a transcription (``--enable-log-requests``).
ADDED = "Added request transcribe-"


@pytest.fixture(scope="module")
def whisper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    assert (MODEL_DIR / "config.json").exists(), f"{MODEL_DIR} is missing: run `make setup`"
    env = {
        "ENGINE_MODEL_DIR": str(MODEL_DIR),
        "ENGINE_MODEL_NAME": WHISPER,
        "ENGINE_MAX_MODEL_LEN": "448",
        "ENGINE_KV_BLOCKS": "64",
        "ENGINE_MAX_NUM_SEQS": "4",
        "VLLM_SERVER_DEV_MODE": "1",
        # "Added request <id>" for each: what tells a test the engine holds
        # a request while it is paused (its metrics stand still then).
        "ENGINE_EXTRA_ARGS": "--enable-log-requests",
    }
    with running_engine("whisper", tmp_path_factory.mktemp("whisper"), env) as started:
        yield started


@pytest.fixture(scope="module")
def keyed(whisper: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """The gateway as deployed (its defaults), with a key."""
    keys = write_keys_file(
        tmp_path_factory.mktemp("keys") / "keys.yaml",
        [key_entry("acme-1", "acme", KEY, tokens_per_minute=1_000_000)],
    )
    with running_gateway(
        tmp_path_factory.mktemp("gateway"), whisper.url, {"keys_file": keys}
    ) as gateway:
        yield gateway


@pytest.fixture
def idle_whisper(whisper: Engine) -> Engine:
    assert wait_until(lambda: engine_idle(whisper.metric), timeout=60), "engine still busy"
    return whisper


def sdk(gateway: Gateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0)


async def post_form(
    gateway: Gateway, path: str, seconds: float, **fields: object
) -> httpx.Response:
    form, headers = audio_form(WHISPER, seconds, **fields)
    async with httpx.AsyncClient(base_url=gateway.url, timeout=120) as http:
        return await http.post(
            path, content=form, headers={**headers, "authorization": f"Bearer {KEY}"}
        )


def pays_its_estimate(gateway: Gateway, request_id: str, route: str) -> None:
    """A whole answer's usage counts seconds, not tokens: the request pays
    its estimated prompt (its window's encoder positions and decoder
    prompt), after a charge of that and its 8 tokens at most."""
    line = access_line(gateway, request_id)
    assert (line["route"], line["outcome"]) == (route, "completed")
    assert line["used_tokens"] == ENCODER + DECODER_PROMPT
    assert line["charged_tokens"] == ENCODER + DECODER_PROMPT + 8


async def test_a_transcription_is_answered_through_the_sdk_and_pays_its_estimate(
    keyed: Gateway, idle_whisper: Engine
) -> None:
    async with sdk(keyed) as client:
        reply = await client.audio.transcriptions.with_raw_response.create(
            model=WHISPER,
            file=("tone.wav", wav(2.0), "audio/wav"),
            extra_body={"max_completion_tokens": 8},
        )
    assert reply.status_code == 200
    assert isinstance(reply.parse().text, str)
    pays_its_estimate(keyed, reply.headers["x-request-id"], "transcriptions")


async def test_a_translation_is_answered_and_pays_its_estimate(
    keyed: Gateway, idle_whisper: Engine
) -> None:
    # The SDK's translations call is deprecated: plain HTTP, as a client
    # of vLLM's route would send it.
    reply = await post_form(keyed, "/v1/audio/translations", 2.0, max_completion_tokens="8")
    assert reply.status_code == 200, reply.text
    assert isinstance(reply.json()["text"], str)
    pays_its_estimate(keyed, reply.headers["x-request-id"], "translations")


async def stream_events(gateway: Gateway, **fields: object) -> tuple[list[str], str]:
    """A streamed transcription's data events, as sent, and its request id."""
    form, headers = audio_form(WHISPER, 2.0, stream="true", **fields)
    async with (
        httpx.AsyncClient(base_url=gateway.url, timeout=60) as http,
        http.stream(
            "POST",
            "/v1/audio/transcriptions",
            content=form,
            headers={**headers, "authorization": f"Bearer {KEY}"},
        ) as reply,
    ):
        assert reply.status_code == 200
        events = [
            line.removeprefix("data: ")
            async for line in reply.aiter_lines()
            if line.startswith("data: ")
        ]
        return events, reply.headers["x-request-id"]


async def test_a_streamed_transcription_is_relayed_and_pays_what_the_engine_counted(
    keyed: Gateway, idle_whisper: Engine
) -> None:
    events, request_id = await stream_events(keyed, max_completion_tokens="8")
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert chunks
    assert {chunk["object"] for chunk in chunks} == {"transcription.chunk"}
    # The gateway asked the engine for the usage chunk, and kept it to itself.
    assert all(chunk.get("usage") is None for chunk in chunks)
    line = access_line(keyed, request_id)
    assert (line["route"], line["outcome"]) == ("transcriptions", "completed")
    assert 0 < line["completion_tokens"] <= 8
    assert line["used_tokens"] == line["prompt_tokens"] + line["completion_tokens"]

    asked, _ = await stream_events(keyed, max_completion_tokens="8", stream_include_usage="true")
    usage = [chunk["usage"] for e in asked[:-1] if (chunk := json.loads(e)).get("usage")]
    assert len(usage) == 1
    assert 0 < usage[0]["completion_tokens"] <= 8


async def test_a_long_upload_runs_as_the_windows_it_reserved(
    keyed: Gateway, idle_whisper: Engine
) -> None:
    before = ran_to_the_end(idle_whisper)
    reply = await post_form(
        keyed, "/v1/audio/transcriptions", 70.0, language="en", max_completion_tokens="4"
    )
    assert reply.status_code == 200, reply.text
    # 70 s: three windows of at most 30 s, each a sequence of its own.
    windows = 3
    assert ran_to_the_end(idle_whisper) == before + windows
    line = access_line(keyed, reply.headers["x-request-id"])
    assert line["charged_tokens"] == windows * (ENCODER + DECODER_PROMPT + 4)


@asynccontextmanager
async def paused(engine: Engine) -> AsyncIterator[None]:
    """The engine keeps its requests, unscheduled, until the block ends."""
    async with httpx.AsyncClient(base_url=engine.url, timeout=30) as http:
        (await http.post("/pause", params={"mode": "keep"})).raise_for_status()
        try:
            yield
        finally:
            (await http.post("/resume")).raise_for_status()


async def test_a_client_that_leaves_a_stream_before_its_first_token_frees_the_engine(
    keyed: Gateway, idle_whisper: Engine
) -> None:
    """The engine is paused before the stream is sent, so the request waits
    there, unscheduled, however fast the machine: only the abort the
    gateway sends when its client leaves can end it (else it would run once
    the engine resumes)."""
    engine = idle_whisper
    before, finished = cancels(keyed, "waiting_first_token"), ran_to_the_end(engine)
    added = engine.process.log_text().count(ADDED)
    # A language named: no detection request before the window's.
    form, headers = audio_form(WHISPER, 2.0, stream="true", language="en")
    async with paused(engine), httpx.AsyncClient(base_url=keyed.url, timeout=60) as http:
        sent = asyncio.create_task(
            http.post(
                "/v1/audio/transcriptions",
                content=form,
                headers={**headers, "authorization": f"Bearer {KEY}"},
            )
        )
        try:
            # The engine has it, unscheduled while it is paused.
            assert await wait_for(lambda: engine.process.log_text().count(ADDED) == added + 1, 30)
        finally:
            sent.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sent
        assert await wait_for(lambda: cancels(keyed, "waiting_first_token") == before + 1, 30)
    assert wait_until(lambda: engine_idle(engine.metric), timeout=30)
    assert ran_to_the_end(engine) == finished
    assert keyed.metric("gateway_kv_tokens_reserved") == 0


@pytest.fixture(scope="module")
def one_sequence(whisper: Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with one_at_a_time(tmp_path_factory, whisper) as gateway:
        yield gateway


async def test_a_client_that_leaves_while_queued_or_running_is_cancelled_there(
    whisper: Engine, one_sequence: Gateway
) -> None:
    form = audio_form(WHISPER, 2.0, language="en", max_completion_tokens="4")
    await leave_while_queued_and_running(
        whisper, one_sequence, "/v1/audio/transcriptions", form, KEY
    )


async def test_what_is_not_a_form_is_refused_as_openai_says(keyed: Gateway) -> None:
    async with httpx.AsyncClient(base_url=keyed.url, timeout=30) as http:
        headers = {"authorization": f"Bearer {KEY}"}
        as_json = await http.post(
            "/v1/audio/transcriptions", json={"model": WHISPER}, headers=headers
        )
        without = await http.post(
            "/v1/audio/transcriptions",
            data={"model": WHISPER},
            files={"other": ("x.txt", b"x")},
            headers=headers,
        )
    assert as_json.status_code == 415
    assert as_json.json()["error"]["code"] == "unsupported_media_type"
    assert without.status_code == 400
    assert without.json()["error"]["param"] == "file"
