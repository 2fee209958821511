"""The audio routes' bodies: a form read and encoded again
(``app.bodies.forms``), what an upload asks of the engine
(``app.bodies.audio``: its windows, each an encoder's positions beside the
decoder's prompt and output), and, in-process against a scripted engine,
what the gateway refuses of a form and what it sends the engine."""

from typing import Any

import pytest

from app.admission.demand import demand_of
from app.admission.estimate import PromptTokenEstimator
from app.bodies.audio import ENCODER_POSITIONS, audio_seconds, parse_audio, windows_of
from app.bodies.forms import Upload, encode_form, read_form
from app.request.errors import InvalidRequest
from app.request.validation import Limits, check_request
from tests.support.asgi import in_process_gateway
from tests.support.audio import audio_form, wav
from tests.support.scripted_engine import MODEL, ScriptedEngine

TRANSCRIPTIONS = "/v1/audio/transcriptions"
TONE = Upload("tone.wav", "audio/wav", wav(2.0))


async def round_trip(fields: dict[str, Any]) -> dict[str, Any]:
    body, content_type = encode_form(fields)
    return await read_form(body, content_type)


async def test_a_form_reads_back_as_it_was_encoded() -> None:
    fields = {
        "model": "whisper",
        "timestamp_granularities[]": ["word", "segment"],
        "vllm_xargs": {"k": 1},
        "file": TONE,
    }
    assert await round_trip(fields) == fields


async def test_what_is_not_a_form_is_refused_with_a_400() -> None:
    with pytest.raises(InvalidRequest, match="form could not be read"):
        await read_form(b"not a form", "multipart/form-data")
    body, content_type = encode_form({"vllm_xargs": "{not json", "file": TONE})
    with pytest.raises(InvalidRequest, match="JSON object") as refused:
        await read_form(body, content_type)
    assert refused.value.param == "vllm_xargs"


def test_an_uploads_length_comes_from_its_header_else_its_size() -> None:
    assert audio_seconds(wav(70.0)) == pytest.approx(70.0)
    # No audio header: its size at 32 kbit/s.
    assert audio_seconds(b"\x00" * 40_000) == pytest.approx(10.0)


@pytest.mark.parametrize(
    ("seconds", "windows"), [(2, 1), (30, 1), (30.5, 2), (58, 2), (70, 3), (600, 21)]
)
def test_audio_is_cut_into_the_windows_vllm_cuts(seconds: float, windows: int) -> None:
    assert windows_of(seconds) == windows


def test_each_window_holds_an_encoders_positions_beside_the_decoders_tokens() -> None:
    parsed = parse_audio(
        {
            "model": "whisper",
            "file": Upload("a.wav", "audio/wav", wav(70.0)),
            "stream": "true",
            "max_completion_tokens": "8",
            "stream_include_usage": "1",
        }
    )
    assert parsed.stream
    assert parsed.wants_usage
    assert parsed.max_tokens == 8
    assert [prompt.encoder for prompt in parsed.prompts] == [ENCODER_POSITIONS] * 3
    job = check_request(
        "transcriptions",
        {"model": "whisper", "file": TONE, "max_completion_tokens": "8"},
        {"whisper": 448},
        Limits(max_n=1, max_batch=64),
    )
    demand = demand_of(job, PromptTokenEstimator())
    # The decoder's prompt: Whisper's four special tokens.
    assert demand.seq_tokens == (ENCODER_POSITIONS + 4 + 8,)
    assert demand.prompt_tokens == ENCODER_POSITIONS + 4


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "whisper"}, "file"),
        ({"model": "whisper", "file": "not a file"}, "file"),
        ({"file": TONE}, "model"),
        ({"model": "whisper", "file": TONE, "max_completion_tokens": "0"}, "max_completion_tokens"),
    ],
)
def test_a_form_without_what_it_needs_is_refused_naming_the_field(
    body: dict[str, Any], param: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse_audio(body)
    assert refused.value.param == param


def audio_engine() -> ScriptedEngine:
    # Blocks of 128: an audio window's 1,500 encoder positions fit.
    return ScriptedEngine(block_size=128)


async def test_the_engine_gets_the_form_with_the_file_as_sent() -> None:
    async with in_process_gateway(audio_engine()) as gateway:
        form, headers = audio_form(
            MODEL, 2.0, language="en", stream="true", max_completion_tokens="4"
        )
        exchange = gateway.request(TRANSCRIPTIONS, form, headers=headers)
        call = await gateway.engine.calls.get()
        assert call.headers["content-type"].startswith("multipart/form-data; boundary=")
        assert call.body["file"] == wav(2.0)
        assert (call.body["model"], call.body["language"]) == (MODEL, "en")
        # The gateway reads the stream's usage: it asked for it.
        assert call.body["stream_include_usage"] == "true"
        call.answer(200, {"text": "", "usage": {"type": "duration", "seconds": 2}})
        await exchange.done()


async def test_a_body_that_is_not_a_form_gets_415() -> None:
    async with in_process_gateway(audio_engine()) as gateway:
        exchange = await gateway.request(TRANSCRIPTIONS, {"model": MODEL}).done()
        assert exchange.status == 415
        assert exchange.json()["error"]["code"] == "unsupported_media_type"
        assert gateway.engine.calls.empty()


async def test_an_upload_is_bounded_by_its_own_limit_not_the_json_one() -> None:
    form, headers = audio_form(MODEL, 20.0, max_completion_tokens="4")  # 640 kB
    async with in_process_gateway(
        audio_engine(), max_body_bytes=1024 * 1024, max_upload_bytes=len(form) - 1
    ) as gateway:
        exchange = await gateway.request(TRANSCRIPTIONS, form, headers=headers).done()
        assert exchange.status == 413
    async with in_process_gateway(
        audio_engine(), max_body_bytes=1024 * 1024, max_upload_bytes=len(form)
    ) as gateway:
        exchange = gateway.request(TRANSCRIPTIONS, form, headers=headers)
        call = await gateway.engine.calls.get()
        call.answer(200, {"text": ""})
        await exchange.done()
        assert exchange.status == 200


async def test_an_upload_that_stalls_gets_408() -> None:
    form, headers = audio_form(MODEL, 2.0)
    async with in_process_gateway(audio_engine(), body_timeout=0.2) as gateway:
        exchange = gateway.request(TRANSCRIPTIONS, headers=headers, complete=False)
        exchange.send_body(form[:1000], more=True)
        await exchange.done()
        assert exchange.status == 408
        assert gateway.metric("gateway_rejections_total", reason="body_timeout") == 1
