"""What a relayed stream forwards and what it says about the request
(``app.relay.stream``), in-process: the usage chunk dropped unless the
client asked for it, content carrying usage never taken for it, a stream
that ends without ``[DONE]`` a failure, and a stream due to reach its
``max_tokens`` within the time ahead saying so once, never on a pace
measured over less than half that time."""

import json

from app.observe.metrics import GatewayMetrics
from app.relay.stream import StreamRelay
from app.request.record import RequestRecord, Telemetry
from app.request.routes import OPENAI_USAGE
from tests.support.asgi import in_process_gateway
from tests.support.asgi_streams import events, final_error, open_stream
from tests.support.scripted_engine import DONE, chunk, usage_chunk


async def test_a_whole_stream_completes_and_usage_is_dropped_unless_asked() -> None:
    async with in_process_gateway() as gateway:
        exchange, call = await open_stream(gateway)
        call.send(chunk("a") + chunk("b", finish="length"))
        call.send(usage_chunk(3, 2) + DONE)
        call.end()
        await exchange.done()
        assert events(exchange) == [chunk("a")[:-2], chunk("b", "length")[:-2], DONE[:-2]]
        assert gateway.metric("gateway_requests_total", outcome="completed") == 1
        assert gateway.metric("gateway_tokens_total", kind="completion") == 2
        await call.wait_closed()
        assert gateway.settled()


async def test_content_still_arrives_with_continuous_usage_stats() -> None:
    """A content chunk that carries usage (continuous usage stats) is never
    dropped, even when the client did not ask for the usage chunk."""
    async with in_process_gateway() as gateway:
        gateway.teach_events()
        exchange, call = await open_stream(gateway)
        assert call.body["stream_options"] == {
            "include_usage": True,
            "continuous_usage_stats": False,
        }
        with_usage = json.loads(chunk("a")[6:])
        with_usage["usage"] = {"prompt_tokens": 3, "completion_tokens": 1}
        call.send(
            b"data: " + json.dumps(with_usage, separators=(",", ":")).encode() + b"\n\n" + DONE
        )
        call.end()
        await exchange.done()
        assert b'"text":"a"' in exchange.body


async def test_a_stream_without_done_is_a_failure() -> None:
    async with in_process_gateway() as gateway:
        exchange, call = await open_stream(gateway)
        call.send(chunk("a"))
        call.end()
        await exchange.done()
        assert final_error(exchange)["code"] == "engine_error"
        assert gateway.settled()


def _relay() -> StreamRelay:
    metrics = GatewayMetrics()
    return StreamRelay(
        RequestRecord("r", "completions", Telemetry(metrics)),
        metrics,
        usage=OPENAI_USAGE,
        forward_usage=False,
    )


def test_a_stream_calls_once_when_its_bound_is_due_within_the_time_ahead() -> None:
    """One token every 0.1 s toward a bound of 100: due within 1 s from the
    90th on (10 left), not at the 89th, and called once."""
    relay, called = _relay(), []
    relay.ending_within(lambda: 1.0, 100, lambda: called.append(1))
    for i in range(89):
        relay.feed(chunk("t"), 0.1 * i)
    assert called == []
    relay.feed(chunk("t"), 0.1 * 89)
    assert called == [1]
    for i in range(90, 100):
        relay.feed(chunk("t"), 0.1 * i)
    assert called == [1]


def test_first_tokens_read_together_give_no_pace() -> None:
    """Ten tokens in one read (the relay read late) say nothing of the pace:
    nothing is called until it was measured over half the second ahead, and
    then about when a steady stream would call (the 89th token; the 90th
    there)."""
    relay, called = _relay(), []
    relay.ending_within(lambda: 1.0, 100, lambda: called.append(1))
    relay.feed(chunk("t") * 10, 0.0)
    assert called == []
    for i in range(1, 79):
        relay.feed(chunk("t"), 0.1 * i)
    assert called == []
    relay.feed(chunk("t"), 7.9)
    assert called == [1]


def test_events_carrying_several_tokens_are_counted_as_such() -> None:
    """Two tokens an event, one event every 0.2 s, toward 100 tokens: due
    within 1 s from the 45th event on (10 tokens left); counted one an event,
    it would never be due before its 50 events ended."""
    relay, called = _relay(), []
    relay.ending_within(lambda: 1.0, 100, lambda: called.append(1), per_event=lambda: 2.0)
    for i in range(44):
        relay.feed(chunk("tt"), 0.2 * i)
    assert called == []
    relay.feed(chunk("tt"), 0.2 * 44)
    assert called == [1]


def test_a_stream_counts_with_what_its_engine_learned_since_it_began() -> None:
    """A stream that began when its engine knew one token an event, and
    whose engine then learned two (another stream completed), counts two
    from then on: due at the 45th event, as if it had known from the start."""
    relay, called, carried = _relay(), [], [1.0]
    relay.ending_within(lambda: 1.0, 100, lambda: called.append(1), per_event=lambda: carried[0])
    for i in range(30):
        relay.feed(chunk("tt"), 0.2 * i)
    carried[0] = 2.0
    for i in range(30, 44):
        relay.feed(chunk("tt"), 0.2 * i)
    assert called == []
    relay.feed(chunk("tt"), 0.2 * 44)
    assert called == [1]


def test_a_stream_reads_its_time_ahead_at_each_check() -> None:
    """A stream whose time ahead grows from 1 s to 2 s while it streams
    (others were admitted around it) is due 2 s from its bound: at the 80th
    token of 100, one every 0.1 s, not the 90th."""
    relay, called, ahead = _relay(), [], [1.0]
    relay.ending_within(lambda: ahead[0], 100, lambda: called.append(1))
    for i in range(50):
        relay.feed(chunk("t"), 0.1 * i)
    ahead[0] = 2.0
    for i in range(50, 79):
        relay.feed(chunk("t"), 0.1 * i)
    assert called == []
    relay.feed(chunk("t"), 7.9)
    assert called == [1]


def test_a_stream_with_no_time_ahead_calls_nothing() -> None:
    relay, called = _relay(), []
    relay.ending_within(lambda: 0.0, 3, lambda: called.append(1))
    for i in range(3):
        relay.feed(chunk("t"), 0.1 * i)
    assert called == []


def test_a_fast_stream_looks_at_its_end_at_most_every_check_interval() -> None:
    """Events 1 ms apart for 1 s: the time ahead is read about once every
    ``_CHECK_EVERY`` (50 ms), not at each of the 1,000 events; the call still
    comes when due (the bound of 1,000 is 0.1 s away at the 900th event, and
    it is made within one interval of that)."""
    relay, called, reads = _relay(), [], []

    def ahead() -> float:
        reads.append(1)
        return 0.1

    relay.ending_within(ahead, 1000, lambda: called.append(len(reads)))
    due_at = None
    for i in range(1000):
        relay.feed(chunk("t"), 0.001 * i)
        if called and due_at is None:
            due_at = i
    assert 18 <= len(reads) <= 21
    assert due_at is not None
    assert 899 <= due_at <= 899 + 50
