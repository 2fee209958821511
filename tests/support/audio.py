"""Audio uploads for the audio routes' tests: a tone as 16-bit mono WAV of
any length, in a multipart form as a client sends it."""

import io
import math
import struct
import wave
from typing import Any

from app.bodies.forms import Upload, encode_form

RATE = 16_000


def wav(seconds: float, rate: int = RATE) -> bytes:
    """``seconds`` of a 440 Hz tone, 16-bit mono WAV at ``rate``."""
    frames = int(seconds * rate)
    samples = (int(8000 * math.sin(2 * math.pi * 440 * i / rate)) for i in range(frames))
    out = io.BytesIO()
    with wave.open(out, "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(rate)
        file.writeframes(b"".join(struct.pack("<h", sample) for sample in samples))
    return out.getvalue()


def audio_form(model: str, seconds: float = 2.0, **fields: Any) -> tuple[bytes, dict[str, str]]:
    """A form with ``seconds`` of audio and ``fields``, and its headers."""
    upload = Upload("tone.wav", "audio/wav", wav(seconds))
    body, content_type = encode_form({"model": model, **fields, "file": upload})
    return body, {"content-type": content_type}
