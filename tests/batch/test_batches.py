"""A batch's record and its input file's checks (``app.batch.batches``,
``app.batch.validate``), and the Batch API's answers in process where no
engine is needed. Run against the real engine: tests/e2e/test_batches.py."""

import json
from pathlib import Path

import pytest

from app.batch.batches import new_batch, page
from app.batch.validate import read_lines
from app.request.errors import InvalidRequest
from tests.support.asgi import in_process_gateway

GOOD = {"input_file_id": "file-1", "endpoint": "/v1/completions", "completion_window": "24h"}


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"endpoint": "/v1/audio/speech"}, "endpoint"),
        ({"completion_window": "1h"}, "completion_window"),
        ({"input_file_id": 7}, "input_file_id"),
        ({"metadata": {"k": 1}}, "metadata"),
    ],
)
def test_a_batch_asked_for_wrongly_is_refused_naming_the_field(
    change: dict[str, object], param: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        new_batch({**GOOD, **change}, "t", 60)
    assert refused.value.param == param


def test_a_new_batch_is_validating_and_expires_after_the_window() -> None:
    record = new_batch(GOOD, "t", 60)
    assert record["status"] == "validating"
    assert record["expires_at"] - record["created_at"] == 60


def test_pages_follow_the_cursor() -> None:
    items = [{"id": str(i)} for i in range(5)]
    first = page(items, None, 2)
    assert ([d["id"] for d in first["data"]], first["has_more"]) == (["0", "1"], True)
    last = page(items, "3", 2)
    assert ([d["id"] for d in last["data"]], last["has_more"]) == (["4"], False)
    with pytest.raises(InvalidRequest):
        page(items, "nope", 2)


def test_a_file_is_read_into_lines_or_the_errors_that_fail_it(tmp_path: Path) -> None:
    def one(custom_id: str, model: str = "m", url: str = "/v1/completions") -> str:
        body = {"model": model, "prompt": "hi"}
        line = {"custom_id": custom_id, "method": "POST", "url": url, "body": body}
        return json.dumps(line)

    good = tmp_path / "good.jsonl"
    good.write_text(one("a") + "\n\n" + one("b") + "\n")
    lines, errors = read_lines(good, "/v1/completions")
    assert (errors, [c for c, _ in lines]) == ([], ["a", "b"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([one("a"), one("b", model="other"), "[1]"]))
    _, errors = read_lines(bad, "/v1/completions")
    assert [(e["line"], e["code"]) for e in errors] == [
        (2, "mismatched_model"),
        (3, "invalid_json_line"),
    ]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert read_lines(empty, "/v1/completions")[1][0]["code"] == "empty_file"


async def test_storage_that_cannot_be_written_is_a_clear_503() -> None:
    async with in_process_gateway(batch_dir=Path("/dev/null/batches")) as gateway:
        listed = await gateway.request("/v1/files", b"", method="GET").done()
    assert listed.status == 503
    assert listed.json()["error"]["code"] == "storage_unavailable"
