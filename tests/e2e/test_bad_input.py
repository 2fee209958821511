"""Bad input gets a clear 4xx in OpenAI's shape, never a 5xx (real engine behind)."""

import json

import httpx
import pytest

from tests.support.engines import MODEL
from tests.support.gateways import Gateway

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MESSAGES = [{"role": "user", "content": "hi"}]


def body(**fields: object) -> bytes:
    return json.dumps(fields).encode()


CASES = [
    # (name, path, raw body, extra headers, status, param)
    ("not json", CHAT, b"{not json", {}, 400, None),
    ("empty body", CHAT, b"", {}, 400, None),
    ("json array", CHAT, b"[1, 2]", {}, 400, None),
    ("missing model", CHAT, body(messages=MESSAGES), {}, 400, "model"),
    ("unknown model", CHAT, body(model="gpt-9", messages=MESSAGES), {}, 404, "model"),
    ("missing messages", CHAT, body(model=MODEL), {}, 400, "messages"),
    ("messages not a list", CHAT, body(model=MODEL, messages="hi"), {}, 400, "messages"),
    (
        "max_tokens a string",
        CHAT,
        body(model=MODEL, messages=MESSAGES, max_tokens="9"),
        {},
        400,
        "max_tokens",
    ),
    (
        "negative max_tokens",
        CHAT,
        body(model=MODEL, messages=MESSAGES, max_tokens=-5),
        {},
        400,
        "max_tokens",
    ),
    (
        "absurd max_tokens",
        CHAT,
        body(model=MODEL, messages=MESSAGES, max_tokens=10**9),
        {},
        400,
        "max_tokens",
    ),
    ("n too large", CHAT, body(model=MODEL, messages=MESSAGES, n=1000), {}, 400, "n"),
    (
        "stream not a bool",
        CHAT,
        body(model=MODEL, messages=MESSAGES, stream="yes"),
        {},
        400,
        "stream",
    ),
    ("missing prompt", COMPLETIONS, body(model=MODEL), {}, 400, "prompt"),
    ("prompt a number", COMPLETIONS, body(model=MODEL, prompt=3), {}, 400, "prompt"),
    ("body too large", CHAT, b'{"model": "' + b"x" * (5 * 1024 * 1024) + b'"}', {}, 413, None),
    (
        "bad priority",
        CHAT,
        body(model=MODEL, messages=MESSAGES),
        {"X-Priority": "urgent"},
        400,
        "X-Priority",
    ),
    (
        "bad tenant",
        CHAT,
        body(model=MODEL, messages=MESSAGES),
        {"X-Tenant-Id": "a b"},
        400,
        "X-Tenant-Id",
    ),
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


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("GET", "/v1/nothing", 404), ("GET", CHAT, 405), ("DELETE", COMPLETIONS, 405)],
)
async def test_unknown_routes_and_methods_answer_in_openai_shape(
    gateway: Gateway, method: str, path: str, status: int
) -> None:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        response = await http.request(method, path)
    assert response.status_code == status
    assert response.json()["error"]["message"]


async def test_refusals_are_counted_as_rejected(gateway: Gateway) -> None:
    rejected = gateway.metric("gateway_requests_total", outcome="rejected")
    too_large = gateway.metric("gateway_rejections_total", reason="too_large")
    async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
        await http.post(CHAT, content=b"{")
        await http.post(CHAT, content=b"x" * (5 * 1024 * 1024))
    assert gateway.metric("gateway_requests_total", outcome="rejected") == rejected + 2
    assert gateway.metric("gateway_rejections_total", reason="too_large") == too_large + 1
