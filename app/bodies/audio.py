"""The bodies of ``/v1/audio/transcriptions`` and ``/v1/audio/translations``:
a form with the audio file and the request's fields (``app.bodies.forms``).

What the engine holds for one (Whisper, as vLLM serves it): the audio is
cut into windows of at most 30 s (vLLM splits a longer one at a quiet point
within the last second of each window, so no window is shorter than 29 s
but the last), each window is one sequence, its encoder's output 1,500
positions (30 s of 10 ms mel frames, halved), kept in the engine's cache
for the decoder's cross-attention, beside the decoder's own prompt and what
it generates, up to ``max_completion_tokens`` (else the model's context).

The audio's length is read from its file's header (mutagen: wav, flac,
mp3, ogg, m4a/mp4 and others), without decoding it. A file whose header
says nothing (webm, or bytes that are no audio) is taken to be as long as
its size at ``FLOOR_BYTES_PER_SECOND`` (32 kbit/s, low for speech codecs):
an upper bound for anything but audio coded below it. Bytes that are no
audio at all are the engine's to refuse, as it does without the gateway.
"""

import io
import math
from typing import Any

import mutagen
from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from app.bodies.base import Parsed, Prompt, refused
from app.bodies.forms import Upload
from app.request.errors import InvalidRequest

__all__ = ["ENCODER_POSITIONS", "audio_seconds", "parse_audio", "windows_of"]

WINDOW_SECONDS = 30.0
# How far before a window's end vLLM may cut it (its ``overlap_chunk_second``).
CUT_WITHIN_SECONDS = 1.0
ENCODER_POSITIONS = 1500
FLOOR_BYTES_PER_SECOND = 32_000 / 8


class _AudioBody(BaseModel):
    # A form's fields are text: booleans and numbers are read from it as
    # vLLM reads them (pydantic's lax mode: "true", "1", "on").
    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)
    model: StrictStr = Field(min_length=1)
    file: Upload
    prompt: StrictStr = ""
    stream: bool = False
    stream_include_usage: bool = False
    stream_continuous_usage_stats: bool = False
    max_completion_tokens: int | None = Field(None, ge=1)


def parse_audio(body: dict[str, Any]) -> Parsed:
    if "file" in body and not isinstance(body["file"], Upload):
        raise InvalidRequest("file: must be an uploaded file", param="file")
    try:
        parsed = _AudioBody.model_validate(body)
    except ValidationError as exc:
        raise refused(exc) from exc
    window = Prompt(text=parsed.prompt, encoder=ENCODER_POSITIONS)
    return Parsed(
        model=parsed.model,
        prompts=(window,) * windows_of(audio_seconds(parsed.file.data)),
        stream=parsed.stream,
        wants_usage=parsed.stream_include_usage,
        max_tokens=parsed.max_completion_tokens,
        max_tokens_param="max_completion_tokens",
    )


def audio_seconds(data: bytes) -> float:
    """How long the audio in ``data`` plays, as its header says; else as
    long as its size at the floor bitrate."""
    try:
        audio = mutagen.File(io.BytesIO(data))
    except Exception:  # mutagen raises its own errors, and others, on odd bytes
        audio = None
    length = getattr(getattr(audio, "info", None), "length", None)
    if isinstance(length, float | int) and length > 0:
        return float(length)
    return len(data) / FLOOR_BYTES_PER_SECOND


def windows_of(seconds: float) -> int:
    """The most windows vLLM cuts ``seconds`` of audio into."""
    if seconds <= WINDOW_SECONDS:
        return 1
    return math.ceil(seconds / (WINDOW_SECONDS - CUT_WITHIN_SECONDS))
