"""A batch's input file, checked as OpenAI checks it before anything runs:
each line a JSON object with a ``custom_id`` unique in the file, ``method``
``POST``, ``url`` the batch's endpoint and a ``body`` object naming the
model, one model for the whole file. A file that fails is refused whole, at
``validating``, with ``errors.data`` naming its lines (the first few dozen);
a line's body that the route refuses is another matter: it is found when
the line runs, and ends in the error file while the rest run."""

import json
from pathlib import Path
from typing import Any

# Errors named in ``errors.data`` at most (the rest are counted, not listed).
_NAMED = 50


def read_lines(path: Path, endpoint: str) -> tuple[list[tuple[str, str]], list[dict[str, Any]]]:
    """The file's lines as (custom_id, body JSON), or the errors that fail it."""
    lines: list[tuple[str, str]] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    models: set[str] = set()

    def fail(number: int, code: str, message: str, param: str | None = None) -> None:
        if len(errors) < _NAMED:
            errors.append({"code": code, "message": message, "param": param, "line": number})

    with path.open("rb") as file:
        for number, raw in enumerate(file, start=1):
            if not raw.strip():
                continue
            try:
                line = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                fail(number, "invalid_json_line", "this line is not valid JSON")
                continue
            if not isinstance(line, dict):
                fail(number, "invalid_json_line", "this line is not a JSON object")
                continue
            custom_id, body = line.get("custom_id"), line.get("body")
            if not isinstance(custom_id, str) or not custom_id:
                fail(number, "missing_required_parameter", "custom_id: a string", "custom_id")
            elif custom_id in seen:
                fail(
                    number,
                    "duplicate_custom_id",
                    f"custom_id {custom_id!r} is not unique",
                    "custom_id",
                )
            if line.get("method") != "POST":
                fail(number, "invalid_value", "method: 'POST'", "method")
            if line.get("url") != endpoint:
                fail(number, "invalid_url", f"url: the batch's endpoint, {endpoint!r}", "url")
            if not isinstance(body, dict) or not isinstance(body.get("model"), str):
                fail(number, "invalid_value", "body: a JSON object naming its model", "body")
                continue
            models.add(body["model"])
            if len(models) > 1:
                fail(
                    number,
                    "mismatched_model",
                    "every line of a batch names one model",
                    "body.model",
                )
            if isinstance(custom_id, str) and custom_id:
                seen.add(custom_id)
                lines.append((custom_id, json.dumps(body)))
    if not lines and not errors:
        errors.append(
            {"code": "empty_file", "message": "the file has no lines", "param": None, "line": None}
        )
    return lines, errors
