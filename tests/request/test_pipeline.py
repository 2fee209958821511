"""The pipeline's glue, in-process: every request ends in exactly one outcome
and gives back whatever it held, however it ends. The races (a client that
leaves mid-upload, one admitted just as it leaves) are set up step by step
against a scripted engine, not slept into. With keys on: who may ask, for
what, how much — and that a refused request never reaches the engine."""

import asyncio
import logging
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from app.admission.base import AdmissionRequest
from app.admission.controller import AdmissionController
from app.admission.hold import KvHold
from app.keys.output import MIN_SAMPLES
from app.request.record import RequestRecord
from tests.support.asgi import InProcessGateway, in_process_gateway
from tests.support.keys import key_entry, write_keys_file
from tests.support.scripted_engine import DONE, MODEL, ScriptedEngine, chunk, next_call, usage_chunk
from tests.support.wait import wait_for

COMPLETIONS = "/v1/completions"
USAGE = {"prompt_tokens": 1, "completion_tokens": 1}


def body(**fields: object) -> dict[str, object]:
    return {"model": MODEL, "prompt": "hello", "max_tokens": 16, **fields}


def outcomes(gateway: InProcessGateway) -> dict[str, float]:
    return {
        outcome: gateway.metric("gateway_requests_total", outcome=outcome)
        for outcome in ("completed", "rejected", "cancelled", "failed")
    }


async def test_a_client_that_leaves_mid_upload_is_cancelled_while_receiving() -> None:
    async with in_process_gateway() as gateway:
        exchange = gateway.request(COMPLETIONS, complete=False)
        exchange.send_body(b'{"model": "tiny", "pro', more=True)
        exchange.disconnect()
        await exchange.done()
        assert outcomes(gateway) == {"completed": 0, "rejected": 0, "cancelled": 1, "failed": 0}
        assert gateway.metric("gateway_cancellations_total", phase="receiving") == 1
        assert gateway.engine.calls.empty()


async def test_a_client_that_leaves_while_queued_never_reaches_the_engine() -> None:
    async with in_process_gateway(max_concurrency=1) as gateway:
        first = gateway.request(COMPLETIONS, body(stream=True))
        call = await gateway.engine.calls.get()
        call.stream()
        queued = gateway.request(COMPLETIONS, body())
        await _until(lambda: gateway.metric("gateway_queue_depth") == 1)
        queued.disconnect()
        await queued.done()
        assert gateway.metric("gateway_cancellations_total", phase="queued") == 1
        assert gateway.engine.calls.empty()
        call.send(chunk("a") + usage_chunk(1, 1) + DONE)
        call.end()
        await first.done()
        assert gateway.settled()
        assert outcomes(gateway)["completed"] == 1


async def test_a_request_behind_a_queue_reads_its_body_after_the_calls_under_way() -> None:
    """A burst's intake would otherwise run ahead of the engine calls of
    those admitted first (``app.request.transit``): the call under way is answered
    before a request behind the queue is read, checked and queued."""
    async with in_process_gateway(max_concurrency=1) as gateway:
        transit, answered = gateway.services.transit, {"choices": [], "usage": USAGE}
        holder = gateway.request(COMPLETIONS, body(stream=True))
        call = await gateway.engine.calls.get()
        assert transit.under_way == 1
        first = gateway.request(COMPLETIONS, body())
        await _until(lambda: gateway.metric("gateway_queue_depth") == 1)
        second = gateway.request(COMPLETIONS, body())
        await _until(lambda: transit.waiting)
        assert gateway.metric("gateway_queue_depth") == 1
        assert gateway.metric("gateway_requests_receiving") == 0
        call.stream()
        await _until(lambda: gateway.metric("gateway_queue_depth") == 2)
        assert not transit.waiting
        call.send(chunk("a") + usage_chunk(1, 1) + DONE)
        call.end()
        await holder.done()
        for exchange in (first, second):
            whole = await gateway.engine.calls.get()
            # A whole answer's head comes with its end: not a call under way.
            assert transit.under_way == 0
            whole.answer(200, answered)
            await exchange.done()
            assert exchange.status == 200
        assert gateway.settled()
        assert outcomes(gateway)["completed"] == 3


@pytest.mark.parametrize("leave_first", [True, False])
async def test_admitted_just_as_the_client_left_gives_the_capacity_back(
    leave_first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queued request is admitted (the holder's capacity given back) and
    its client's disconnect arrives in the same turn of the loop, in either
    order."""
    holds = capture_holds(monkeypatch)
    async with in_process_gateway(max_concurrency=1) as gateway:
        holder = gateway.request(COMPLETIONS, body(stream=True))
        call = await gateway.engine.calls.get()
        call.stream()
        await holder.wait_for(lambda e: e.status == 200)
        queued = gateway.request(COMPLETIONS, body())
        await _until(lambda: gateway.metric("gateway_queue_depth") == 1)
        admission = gateway.services.admission
        assert isinstance(admission, AdmissionController)
        (holders_ticket,) = holds
        if leave_first:
            queued.disconnect()
            admission.give_back(holders_ticket.reservation)
        else:
            admission.give_back(holders_ticket.reservation)
            queued.disconnect()
        await queued.done()
        assert gateway.metric("gateway_requests_total", outcome="cancelled") == 1
        assert admission.policy.in_flight == 0
        assert sum(e.reserved_blocks for e in admission.policy.engines.values()) == 0
        # The holder's own release later changes nothing: it was given back once.
        call.send(chunk("a") + DONE)
        call.end()
        await holder.done()
        assert admission.policy.in_flight == 0
        assert gateway.settled()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"model": "tiny", "prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested"),
        (b'{"model": "tiny", "prompt": "\\ud800", "max_tokens": 5}', "surrogate"),
        (b'{"model": "tiny", "prompt": [[' + b"[1]," * 2000 + b"[1]]]}", None),
    ],
    ids=["deeply-nested", "lone-surrogate", "nested-token-lists"],
)
async def test_hostile_json_is_a_400_with_one_outcome(raw: bytes, message: str | None) -> None:
    async with in_process_gateway() as gateway:
        exchange = await gateway.request(COMPLETIONS, raw).done()
        assert exchange.status == 400
        error = exchange.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        if message:
            assert message in error["message"]
        assert outcomes(gateway) == {"completed": 0, "rejected": 1, "cancelled": 0, "failed": 0}
        assert gateway.engine.calls.empty()


async def test_a_body_that_is_not_json_by_its_content_type_is_a_415() -> None:
    async with in_process_gateway() as gateway:
        exchange = gateway.request(COMPLETIONS, body(), headers={"content-type": "text/plain"})
        await exchange.done()
        assert exchange.status == 415
        assert gateway.metric("gateway_requests_total", outcome="rejected") == 1


async def test_a_stream_over_http_1_0_is_refused() -> None:
    async with in_process_gateway() as gateway:
        exchange = await gateway.request(COMPLETIONS, body(stream=True), http_version="1.0").done()
        assert exchange.status == 400
        assert exchange.json()["error"]["param"] == "stream"


async def test_a_bug_is_one_500_in_openai_shape_and_one_outcome(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with in_process_gateway() as gateway:

        def broken(*args: object, **kwargs: object) -> None:
            raise KeyError("a bug")

        monkeypatch.setattr("app.request.pipeline.check_request", broken)
        exchange = await gateway.request(COMPLETIONS, body()).done()
        assert exchange.status == 500
        assert exchange.json()["error"]["code"] == "internal_error"
        assert outcomes(gateway)["failed"] == 1


async def test_the_engine_gets_an_id_of_the_gateway_not_the_clients() -> None:
    async with in_process_gateway() as gateway:
        ids = []
        for _ in range(2):
            exchange = gateway.request(COMPLETIONS, body(), headers={"x-request-id": "same"})
            call = await gateway.engine.calls.get()
            call.answer(200, {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
            await exchange.done()
            assert exchange.headers["x-request-id"] == "same"
            ids.append(call.headers["x-request-id"])
        assert ids[0] != ids[1]
        assert "same" not in ids


async def test_an_engine_4xx_is_the_clients_error() -> None:
    async with in_process_gateway() as gateway:
        exchange = gateway.request(COMPLETIONS, body(temperature=-1))
        call = await gateway.engine.calls.get()
        error = {"message": "temperature must be non-negative", "type": "BadRequestError"}
        call.answer(400, {"error": {**error, "param": "temperature", "code": 400}})
        await exchange.done()
        assert exchange.status == 400
        assert gateway.metric("gateway_requests_total", outcome="rejected") == 1
        assert gateway.metric("gateway_rejections_total", reason="engine_invalid") == 1
        assert gateway.settled()


async def test_served_and_refused_durations_are_kept_apart() -> None:
    async with in_process_gateway() as gateway:
        await gateway.request(COMPLETIONS, b"{").done()
        exchange = gateway.request(COMPLETIONS, body())
        call = await gateway.engine.calls.get()
        call.answer(200, {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
        await exchange.done()
        count = "gateway_request_duration_seconds_count"
        assert gateway.metric(count, outcome="rejected") == 1
        assert gateway.metric(count, outcome="completed") == 1


def capture_holds(monkeypatch: pytest.MonkeyPatch) -> list[KvHold]:
    """Keep every ticket admission hands out, so a test can give one back
    at the moment it chooses."""
    holds: list[KvHold] = []
    admit = AdmissionController.admit

    async def keeping(
        self: AdmissionController,
        request: AdmissionRequest,
        record: RequestRecord,
        excluded: Iterable[str] = (),
    ) -> KvHold:
        ticket = await admit(self, request, record, excluded)
        holds.append(ticket)
        return ticket

    monkeypatch.setattr(AdmissionController, "admit", keeping)
    return holds


async def _until(check: Callable[[], bool]) -> None:
    """Let the gateway's tasks run until ``check`` holds."""
    for _ in range(10_000):
        if check():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never became true")


async def test_a_body_that_stalls_gets_408_and_one_outcome() -> None:
    async with in_process_gateway(body_timeout=0.2) as gateway:
        exchange = gateway.request(COMPLETIONS, complete=False)
        exchange.send_body(b'{"model": "tiny", ', more=True)
        await exchange.done()
        assert exchange.status == 408
        assert exchange.json()["error"]["code"] == "request_timeout"
        assert gateway.metric("gateway_rejections_total", reason="body_timeout") == 1
        assert sum(outcomes(gateway).values()) == 1
        assert gateway.metric("gateway_requests_receiving") == 0


async def test_requests_beyond_the_receiving_bound_are_refused_before_their_body() -> None:
    async with in_process_gateway(max_receiving=1) as gateway:
        slow = gateway.request(COMPLETIONS, complete=False)
        slow.send_body(b'{"model": ', more=True)
        await _until(lambda: gateway.metric("gateway_requests_receiving") == 1)
        refused = await gateway.request(COMPLETIONS, body()).done()
        assert refused.status == 503
        assert refused.json()["error"]["code"] == "overloaded"
        assert "retry-after" in refused.headers
        slow.disconnect()
        await slow.done()
        assert gateway.metric("gateway_requests_receiving") == 0


async def test_an_exhausted_connection_pool_is_not_the_engine_being_down() -> None:
    # The pool's one connection is held by a stream; a second request waits
    # for it no longer than the connect timeout.
    async with in_process_gateway(
        upstream_max_connections=1, upstream_connect_timeout=1.0
    ) as gateway:
        # The monitor's first checks are over (the next is an hour away).
        assert await wait_for(lambda: gateway.engine.requests["/metrics"] >= 2, timeout=30)
        holder = gateway.request(COMPLETIONS, body(stream=True))
        call = await gateway.engine.calls.get()
        call.stream()
        await holder.wait_for(lambda e: e.status == 200)
        exchange = await gateway.request(COMPLETIONS, body()).done()
        assert exchange.status == 503
        assert exchange.json()["error"]["code"] == "gateway_pool_exhausted"
        assert gateway.engine.calls.empty()
        assert gateway.services.engines.up
        call.send(chunk("a") + DONE)
        call.end()
        await holder.done()
        assert gateway.settled()


# --- keys -----------------------------------------------------------------------

BODY = {"model": MODEL, "prompt": "hello", "max_tokens": 10}


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    acme = key_entry(
        "acme-1",
        "acme",
        "key-acme",
        priorities=("normal", "low"),
        tokens_per_minute=100,
        requests_per_minute=50,
    )
    globex = key_entry("globex-1", "globex", "key-globex", priorities=("high", "normal"))
    return write_keys_file(tmp_path / "keys.yaml", [acme, globex])


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_no_key_or_a_wrong_one_is_401_and_the_engine_sees_nothing(keys_file: Path) -> None:
    async with in_process_gateway(keys_file=keys_file) as gateway:
        for headers in ({}, bearer("nope"), {"authorization": "key-acme"}):
            exchange = await gateway.request(COMPLETIONS, BODY, headers=headers).done()
            assert exchange.status == 401
            assert exchange.json()["error"]["code"] == "invalid_api_key"
        assert gateway.metric("gateway_rejections_total", reason="unauthorized") == 3
        assert gateway.metric("gateway_tenant_rejections_total") == 0
        assert gateway.engine.calls.empty()


async def test_a_priority_the_key_may_not_use_is_403(keys_file: Path) -> None:
    async with in_process_gateway(keys_file=keys_file) as gateway:
        headers = {**bearer("key-acme"), "x-priority": "high"}
        exchange = await gateway.request(COMPLETIONS, BODY, headers=headers).done()
        assert exchange.status == 403
        assert gateway.metric("gateway_tenant_rejections_total", tenant="acme") == 1
        assert gateway.engine.calls.empty()


async def test_the_key_sets_the_tenant_and_its_limits_answer_like_openai(keys_file: Path) -> None:
    async with in_process_gateway(keys_file=keys_file) as gateway:
        headers = {**bearer("key-acme"), "x-tenant-id": "not-acme"}
        first = gateway.request(COMPLETIONS, {**BODY, "max_tokens": 60}, headers=headers)
        call = await gateway.engine.calls.get()
        call.answer(200, {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 60}})
        await first.done()
        assert first.status == 200
        assert first.headers["x-ratelimit-limit-tokens"] == "100"
        assert int(first.headers["x-ratelimit-remaining-tokens"]) < 40
        # The next worst case does not fit what is left of the window.
        second = await gateway.request(
            COMPLETIONS, BODY | {"max_tokens": 60}, headers=headers
        ).done()
        assert second.status == 429
        error = second.json()["error"]
        assert (error["code"], error["type"]) == ("rate_limit_exceeded", "tokens")
        assert int(second.headers["retry-after"]) >= 1
        assert second.headers["x-ratelimit-limit-tokens"] == "100"
        assert (
            gateway.metric("gateway_tenant_rejections_total", tenant="acme", reason="rate_limited")
            == 1
        )
        assert gateway.metric("gateway_tenant_tokens_total", tenant="acme", kind="used") == 63
        assert gateway.metric("gateway_tenant_tokens_total", tenant="not-acme") == 0


async def test_a_cancelled_stream_pays_for_what_it_was_sent(keys_file: Path) -> None:
    async with in_process_gateway(keys_file=keys_file) as gateway:
        headers = bearer("key-acme")
        exchange = gateway.request(COMPLETIONS, {**BODY, "stream": True}, headers=headers)
        call = await gateway.engine.calls.get()
        call.stream()
        call.send(chunk("a") + chunk("b") + chunk("c"))
        await exchange.wait_for(lambda e: e.body.count(b'"text"') >= 3)
        exchange.disconnect()
        await exchange.done()
        used = gateway.metric("gateway_tenant_tokens_total", tenant="acme", kind="used")
        # The prompt (estimated: no usage chunk came) and the three tokens sent.
        assert 3 < used < 10
        assert gateway.settled()


async def test_a_completed_stream_pays_its_usage(keys_file: Path) -> None:
    async with in_process_gateway(keys_file=keys_file) as gateway:
        exchange = gateway.request(
            COMPLETIONS, {**BODY, "stream": True}, headers=bearer("key-acme")
        )
        call = await gateway.engine.calls.get()
        call.stream()
        call.send(chunk("a") + usage_chunk(4, 1) + DONE)
        call.end()
        await exchange.done()
        assert exchange.headers["x-ratelimit-limit-tokens"] == "100"
        assert gateway.metric("gateway_tenant_tokens_total", tenant="acme", kind="used") == 5


async def test_what_a_key_is_charged_is_learned_from_its_completed_requests(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Completed requests teach the key's estimate; cancelled ones do not
    (a stream cut after one token says nothing about the next)."""
    entry = key_entry("acme-1", "acme", "key-acme", tokens_per_minute=100_000)
    keys = write_keys_file(tmp_path / "keys.yaml", [entry])
    # 4 prompt tokens (given as ids: counted exactly), at most 100 more.
    asked = {"model": MODEL, "prompt": [11, 12, 13, 14], "max_tokens": 100}
    caplog.set_level(logging.INFO, logger="gateway.access")

    def charged() -> tuple[int, int]:
        line = [r.fields for r in caplog.records if r.name == "gateway.access"][-1]  # type: ignore[attr-defined]
        return line["charged_tokens"], line["worst_tokens"]

    async with in_process_gateway(keys_file=keys) as gateway:
        headers = bearer("key-acme")
        for _ in range(MIN_SAMPLES):
            exchange = gateway.request(COMPLETIONS, {**asked, "stream": True}, headers=headers)
            call = await gateway.engine.calls.get()
            call.stream()
            call.send(chunk("a") + usage_chunk(4, 1))
            await exchange.wait_for(lambda e: b'"text"' in e.body)
            exchange.disconnect()
            await exchange.done()
            assert charged() == (104, 104)
        assert outcomes(gateway)["cancelled"] == MIN_SAMPLES
        for _ in range(MIN_SAMPLES):
            exchange = gateway.request(COMPLETIONS, asked, headers=headers)
            call = await gateway.engine.calls.get()
            usage = {"prompt_tokens": 4, "completion_tokens": 25}
            call.answer(200, {"choices": [{"index": 0, "text": "x"}], "usage": usage})
            assert (await exchange.done()).status == 200
            assert charged() == (104, 104)
        # A quarter of the allowance: charged its prompt and 25.
        exchange = gateway.request(COMPLETIONS, asked, headers=headers)
        call = await gateway.engine.calls.get()
        call.answer(200, {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 100}})
        await exchange.done()
        assert charged() == (29, 104)
        assert gateway.settled()


async def test_a_prompts_prefix_is_hashed_once_however_often_it_is_admitted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The routing key, the prefix pieces and the retry's second admission
    all read the keys made when the request was received."""
    import app.routing.prefix_key as prefix_key

    chains: list[str] = []
    for name in ("prefix_chain", "block_chain"):
        real = getattr(prefix_key, name)

        def counting(
            *args: object, _real: Callable[..., object] = real, _name: str = name
        ) -> object:
            chains.append(_name)
            return _real(*args)

        monkeypatch.setattr(prefix_key, name, counting)
    a, b = ScriptedEngine(), ScriptedEngine()
    async with in_process_gateway(fleet=(a, b)) as gateway:
        long_prompt = "a document shared by many requests " * 80
        exchange = gateway.request(COMPLETIONS, body(prompt=long_prompt, stream=True))
        first, call = await next_call(a, b)
        call.stream()
        call.drop(reset=False)
        second, retry = await next_call(a, b)
        assert second is not first
        retry.stream()
        retry.send(chunk("x") + usage_chunk(1, 1) + DONE)
        retry.end()
        await exchange.done()
        assert gateway.metric("gateway_engine_retries_total") == 1
    assert len(chains) == 1
