"""``/v1/batches``: a batch's record as OpenAI shows it, made and changed.

``endpoint``: the routes a batch may name (``ENDPOINTS``); the completion
window is ``24h`` as OpenAI's (a gateway's own ``GATEWAY_BATCH_COMPLETION_WINDOW``
decides when it expires: tests shorten it). Statuses: ``validating`` →
``in_progress`` → ``finalizing`` → ``completed``; ``failed`` (its file is not a
valid batch), ``expired`` (its window passed: what did not run is in the
error file), ``cancelling`` → ``cancelled`` (lines running finish, the rest
do not start).
"""

from typing import Any

from app.batch.store import new_id, now
from app.request.errors import InvalidRequest

# The routes a batch's lines may go to.
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
_STAMPS = (
    "in_progress_at",
    "finalizing_at",
    "completed_at",
    "failed_at",
    "expired_at",
    "cancelling_at",
    "cancelled_at",
)


def new_batch(body: Any, tenant: str, window: float) -> dict[str, Any]:
    """The record of a batch asked for with ``body`` (checked here)."""
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object")
    file_id, endpoint = body.get("input_file_id"), body.get("endpoint")
    if not isinstance(file_id, str):
        raise InvalidRequest("input_file_id: the id of an uploaded file", param="input_file_id")
    if endpoint not in ENDPOINTS:
        raise InvalidRequest(f"endpoint: one of {', '.join(ENDPOINTS)}", param="endpoint")
    if body.get("completion_window") != "24h":
        raise InvalidRequest("completion_window: '24h'", param="completion_window")
    metadata = body.get("metadata")
    if metadata is not None and not (
        isinstance(metadata, dict)
        and len(metadata) <= 16
        and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        raise InvalidRequest("metadata: at most 16 string keys and values", param="metadata")
    created = now()
    return {
        "id": new_id("batch"),
        "object": "batch",
        "tenant": tenant,
        "endpoint": endpoint,
        "errors": None,
        "input_file_id": file_id,
        "completion_window": "24h",
        "status": "validating",
        "output_file_id": None,
        "error_file_id": None,
        "created_at": created,
        "expires_at": created + int(window),
        **{stamp: None for stamp in _STAMPS},
        "request_counts": {"total": 0, "completed": 0, "failed": 0},
        "usage": {
            "input_tokens": 0,
            "output_tokens": 0,
            "total_tokens": 0,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
        "metadata": metadata,
        "lines_sent_more_than_once": 0,
    }


def object_of(record: dict[str, Any]) -> dict[str, Any]:
    """What the client sees of a batch (its tenant is the gateway's business)."""
    return {k: v for k, v in record.items() if k != "tenant"}


def page(items: list[dict[str, Any]], after: str | None, limit: int) -> dict[str, Any]:
    """OpenAI's cursor pagination over ``items`` (in their order)."""
    start = 0
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise InvalidRequest(f"after: {after!r} is not in this list", param="after")
        start = ids.index(after) + 1
    data = items[start : start + limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": start + limit < len(items),
    }
