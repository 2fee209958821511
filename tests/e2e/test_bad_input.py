"""Bad input the engine checks itself: the gateway leaves sampling parameters
to the engine, and its refusal reaches the client in its own words, a 4xx in
OpenAI's shape, never a 5xx (real engine behind). What the gateway refuses
before any engine is asked is tested in-process, beside the module that
decides it: tests/request/test_validation.py, tests/keys/test_identify.py,
tests/api/test_entry.py."""

import json

import httpx
import pytest

from tests.support.engines import MODEL
from tests.support.gateways import Gateway

CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "hi"}]


def body(**fields: object) -> bytes:
    return json.dumps(fields).encode()


CASES: list[tuple[str, str, bytes, dict[str, str], int, str | None]] = [
    # (name, path, raw body, extra headers, status, param)
    # Checked by the engine, passed on in its own words.
    (
        "negative temperature",
        CHAT,
        body(model=MODEL, messages=MESSAGES, temperature=-3),
        {},
        400,
        "temperature",
    ),
]


@pytest.mark.parametrize(
    ("name", "path", "raw", "headers", "status", "param"), CASES, ids=[case[0] for case in CASES]
)
async def test_bad_requests_get_their_documented_status(
    gateway: Gateway,
    name: str,
    path: str,
    raw: bytes,
    headers: dict[str, str],
    status: int,
    param: str | None,
) -> None:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        response = await http.post(
            path, content=raw, headers={"content-type": "application/json", **headers}
        )
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) >= {"message", "type", "param", "code"}
    assert error["message"]
    assert error["param"] == param
