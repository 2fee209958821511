"""Multipart form bodies (``multipart/form-data``): the audio routes' uploads.

A form is read, once its bytes are in (bounded as a JSON body is:
``app.request.validation.read_body``), by Starlette's parser over python-multipart,
into a dict as a JSON body would be: each field's value as its text (a list
when the field repeats), the uploaded file as an ``Upload``. The engine gets
the form encoded again from that dict, so that the fields the gateway owns
(``app.request.owned_fields``) are stripped or set on a form as on JSON.

vLLM reads ``vllm_xargs`` in a form as a JSON object: it is decoded here and
encoded again, so the gateway's rules for its keys apply to it too.
"""

import json
import secrets
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import Headers, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from app.request.errors import InvalidRequest

__all__ = ["Upload", "encode_form", "read_form"]

# Fields whose text is a JSON object in the engine's form.
JSON_FIELDS = frozenset({"vllm_xargs"})
# Bounds on a form's shape (its size is bounded as it arrives): one file,
# and no more fields than vLLM's audio requests have, with room to spare.
MAX_FILES = 1
MAX_FIELDS = 64
MAX_FIELD_BYTES = 64 * 1024


@dataclass(frozen=True)
class Upload:
    """A file in a form: its name and media type as the client sent them."""

    filename: str
    content_type: str
    data: bytes


async def read_form(raw: bytes, content_type: str) -> dict[str, Any]:
    """The fields of a ``multipart/form-data`` body; a 400 if it is not one."""
    headers = Headers({"content-type": content_type})
    parser = MultiPartParser(
        headers,
        _once(raw),
        max_files=MAX_FILES,
        max_fields=MAX_FIELDS,
        max_part_size=MAX_FIELD_BYTES,
    )
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise InvalidRequest(f"the request's form could not be read: {exc.message}") from None
    fields: dict[str, Any] = {}
    try:
        for name, value in form.multi_items():
            item = await _item(name, value)
            if name in fields:
                held = fields[name]
                fields[name] = [*held, item] if isinstance(held, list) else [held, item]
            else:
                fields[name] = item
    finally:
        await form.close()
    return fields


def encode_form(fields: dict[str, Any]) -> tuple[bytes, str]:
    """``fields`` (as ``read_form`` reads them) as a ``multipart/form-data``
    body, and its Content-Type."""
    boundary = secrets.token_hex(16)
    parts: list[bytes] = []
    for name, value in fields.items():
        for item in value if isinstance(value, list) else [value]:
            parts.append(f"--{boundary}\r\n".encode())
            if isinstance(item, Upload):
                parts.append(
                    f'Content-Disposition: form-data; name="{_quoted(name)}";'
                    f' filename="{_quoted(item.filename)}"\r\n'
                    f"Content-Type: {item.content_type}\r\n\r\n".encode()
                )
                parts.append(item.data)
            else:
                text = json.dumps(item) if isinstance(item, dict) else str(item)
                parts.append(
                    f'Content-Disposition: form-data; name="{_quoted(name)}"\r\n\r\n'.encode()
                )
                parts.append(text.encode())
            parts.append(b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


async def _item(name: str, value: UploadFile | str) -> Any:
    if isinstance(value, UploadFile):
        return Upload(
            filename=value.filename or "upload",
            content_type=value.content_type or "application/octet-stream",
            data=await value.read(),
        )
    if name in JSON_FIELDS:
        try:
            return json.loads(value)
        except ValueError:
            raise InvalidRequest(f"{name}: must be a JSON object", param=name) from None
    return value


def _quoted(text: str) -> str:
    # A form's names are quoted strings: what would end one is escaped as
    # browsers do (WHATWG's multipart/form-data encoding).
    return text.replace("\r", "%0D").replace("\n", "%0A").replace('"', "%22")


async def _once(raw: bytes) -> AsyncGenerator[bytes, None]:
    yield raw
