"""What the path in front of the engine added, in-process against a scripted
engine that says what it took as vLLM does (``metrics`` beside a stream's
final usage, or a whole answer's): the gateway reads it into its histogram
and its access-log line; a head carries ``Server-Timing`` unless switched
off. That a real engine's figures are read is tests/e2e/test_added_latency.py's."""

import json
import logging
from typing import Any

import pytest

from tests.support.asgi import in_process_gateway
from tests.support.asgi_streams import open_stream
from tests.support.scripted_engine import DONE, MODEL, chunk

FIGURES = {"queue_time_ms": 40.0, "time_to_first_token_ms": 25.0, "generation_time_ms": 90.0}


def final_usage(metrics: dict[str, Any] | None) -> bytes:
    final: dict[str, Any] = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
    if metrics is not None:
        final["metrics"] = metrics
    # Compact, as vLLM writes its chunks.
    return b"data: " + json.dumps(final, separators=(",", ":")).encode() + b"\n\n"


def access_line(caplog: pytest.LogCaptureFixture) -> dict[str, Any]:
    (line,) = [r.fields for r in caplog.records if r.name == "gateway.access"]  # type: ignore[attr-defined]
    return line  # type: ignore[no-any-return]


async def test_a_stream_the_engine_timed_counts_what_the_path_added(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with in_process_gateway() as gateway:
        caplog.set_level(logging.INFO, logger="gateway.access")
        exchange, call = await open_stream(gateway, stream_options={"include_usage": True})
        assert "head;dur=" in exchange.headers["server-timing"]
        call.send(chunk("ab") + chunk("cd", finish="length"))
        call.send(final_usage(FIGURES) + DONE)
        call.end()
        await exchange.done()
        assert gateway.metric("gateway_added_latency_seconds_count", route="completions") == 1
        assert gateway.metric("gateway_engine_timing_missing_total") == 0
        # The engine's figures reach a client that asked for usage as it sent them.
        assert b'"queue_time_ms":40.0' in exchange.body
    line = access_line(caplog)
    assert (line["engine_queue_s"], line["engine_ttft_s"]) == (0.04, 0.025)
    # Admission to first token here, less the engine's 65 ms (each figure
    # rounded to 0.1 ms in the line).
    here = line["ttft_s"] - line["queue_s"]
    assert line["added_s"] == pytest.approx(here - 0.065, abs=3e-4)


async def test_a_whole_answer_the_engine_timed_counts_what_the_path_added(
    caplog: pytest.LogCaptureFixture,
) -> None:
    body = {"model": MODEL, "prompt": "hello", "max_tokens": 2}
    async with in_process_gateway() as gateway:
        caplog.set_level(logging.INFO, logger="gateway.access")
        exchange = gateway.request("/v1/completions", body)
        call = await gateway.engine.calls.get()
        usage = {"prompt_tokens": 3, "completion_tokens": 2}
        call.answer(200, {"id": "x", "choices": [], "usage": usage, "metrics": FIGURES})
        await exchange.done()
        assert "queue;dur=" in exchange.headers["server-timing"]
        assert gateway.metric("gateway_added_latency_seconds_count", route="completions") == 1
    line = access_line(caplog)
    here = line["total_s"] - line["queue_s"]
    assert line["added_s"] == pytest.approx(here - 0.155, abs=3e-4)


async def test_without_the_engines_figures_the_request_is_counted_as_untimed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with in_process_gateway(server_timing=False) as gateway:
        caplog.set_level(logging.INFO, logger="gateway.access")
        exchange, call = await open_stream(gateway, stream_options={"include_usage": True})
        assert "server-timing" not in exchange.headers
        call.send(chunk("ab", finish="length") + final_usage(None) + DONE)
        call.end()
        await exchange.done()
        assert gateway.metric("gateway_added_latency_seconds_count", route="completions") == 0
        assert gateway.metric("gateway_engine_timing_missing_total", route="completions") == 1
    assert access_line(caplog)["added_s"] is None
