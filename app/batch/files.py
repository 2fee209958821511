"""``/v1/files``: uploads for batches, as the ``openai`` SDK sends them.

A multipart form with ``purpose=batch`` and one ``file``, streamed to disk
(Starlette's parser spools a part past 1 MiB to a temporary file; the body
is counted as it arrives and refused once over ``GATEWAY_BATCH_MAX_FILE_BYTES``,
before anything is stored). Then copied into the store, its lines counted
(``GATEWAY_BATCH_MAX_LINES``), the tenant's total held to
``GATEWAY_BATCH_TENANT_BYTES``. ``expires_after`` (anchor ``created_at``,
3,600 s to 30 days, as OpenAI's) sets when it is deleted.
"""

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request

from app.batch.state import BatchState
from app.batch.store import new_id, now
from app.request.errors import BodyTooLarge, InvalidRequest

# What a form carries beside the file (its fields, the parts' headers).
_FORM_MARGIN = 64 * 1024
_EXPIRES_MIN, _EXPIRES_MAX = 3600, 30 * 24 * 3600


@dataclass(frozen=True)
class FileLimits:
    max_bytes: int
    max_lines: int
    tenant_bytes: int


async def _bounded(request: Request, limit: int) -> AsyncGenerator[bytes, None]:
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"the file is larger than {limit - _FORM_MARGIN} bytes")
        yield chunk


async def upload(
    request: Request, files: BatchState, tenant: str, limits: FileLimits
) -> dict[str, Any]:
    """Store the uploaded file; its record (``object_of`` renders it)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit():
        if int(declared) > limits.max_bytes + _FORM_MARGIN:
            raise BodyTooLarge(f"the file is larger than {limits.max_bytes} bytes")
        held = await files.tenant_bytes(tenant)
        if held + int(declared) - _FORM_MARGIN > limits.tenant_bytes:
            raise BodyTooLarge(f"the tenant's files would exceed {limits.tenant_bytes} bytes")
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise InvalidRequest("upload a file as multipart/form-data", param="file")
    parser = MultiPartParser(
        request.headers, _bounded(request, limits.max_bytes + _FORM_MARGIN), max_files=1
    )
    try:
        form = await parser.parse()
    except MultiPartException as error:
        raise InvalidRequest(f"the form cannot be read: {error.message}") from None
    try:
        upload_file = form.get("file")
        if not isinstance(upload_file, UploadFile):
            raise InvalidRequest("the form has no file", param="file")
        purpose = form.get("purpose")
        if purpose != "batch":
            raise InvalidRequest(
                "purpose: this gateway stores files for batches: 'batch'", param="purpose"
            )
        expires_at = _expires(form.get("expires_after[anchor]"), form.get("expires_after[seconds]"))
        record = await _keep(upload_file, files, tenant, limits, expires_at)
    finally:
        await form.close()
    await files.insert_file(record)
    return record


def _expires(anchor: Any, seconds: Any) -> int | None:
    if anchor is None and seconds is None:
        return None
    if anchor != "created_at":
        raise InvalidRequest("expires_after[anchor]: 'created_at'", param="expires_after")
    if not (isinstance(seconds, str) and seconds.isdigit()):
        raise InvalidRequest("expires_after[seconds]: a whole number", param="expires_after")
    if not _EXPIRES_MIN <= int(seconds) <= _EXPIRES_MAX:
        raise InvalidRequest(
            f"expires_after[seconds]: between {_EXPIRES_MIN} and {_EXPIRES_MAX}",
            param="expires_after",
        )
    return now() + int(seconds)


async def _keep(
    part: UploadFile, files: BatchState, tenant: str, limits: FileLimits, expires_at: int | None
) -> dict[str, Any]:
    file_id = new_id("file")
    path = files.path_of(file_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    size = lines = 0
    last = b"\n"
    await part.seek(0)
    with path.open("wb") as out:
        while chunk := await part.read(1 << 20):
            size += len(chunk)
            lines += chunk.count(b"\n")
            last = chunk[-1:]
            out.write(chunk)
    lines += last != b"\n"
    held = await files.tenant_bytes(tenant)
    refusal: Exception | None = None
    if size > limits.max_bytes:
        refusal = BodyTooLarge(f"the file is larger than {limits.max_bytes} bytes")
    elif lines > limits.max_lines:
        refusal = InvalidRequest(f"the file has more than {limits.max_lines} lines", param="file")
    elif held + size > limits.tenant_bytes:
        refusal = BodyTooLarge(f"the tenant's files would exceed {limits.tenant_bytes} bytes")
    if refusal is not None:
        path.unlink(missing_ok=True)
        raise refusal
    return {
        "id": file_id,
        "tenant": tenant,
        "purpose": "batch",
        "filename": part.filename or "upload.jsonl",
        "bytes": size,
        "lines": lines,
        "created_at": now(),
        "expires_at": expires_at,
    }


def object_of(record: dict[str, Any]) -> dict[str, Any]:
    """A file as OpenAI's API shows it."""
    return {
        "id": record["id"],
        "object": "file",
        "bytes": record["bytes"],
        "created_at": record["created_at"],
        "expires_at": record["expires_at"],
        "filename": record["filename"],
        "purpose": record["purpose"],
        "status": "processed",
    }


async def write_output(files: BatchState, tenant: str, purpose: str, lines: list[str]) -> str:
    """A file the gateway writes (a batch's output or errors); its id."""
    file_id = new_id("file")
    path = files.path_of(file_id)
    data = "".join(line + "\n" for line in lines).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    record = {
        "id": file_id,
        "tenant": tenant,
        "purpose": purpose,
        "filename": f"{file_id}.jsonl",
        "bytes": len(data),
        "lines": len(lines),
        "created_at": now(),
        "expires_at": None,
    }
    await files.insert_file(record)
    return file_id
