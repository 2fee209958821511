"""An evicted client's outcome (``benchmarks.classes.eviction``) and the
harness's reading of a stream's final error event
(``benchmarks.harness.client.ErrorEvents``). No engine."""

from benchmarks.classes.eviction import low_outcome, outcomes_seen
from benchmarks.classes.outcomes import CUT
from benchmarks.harness import Call
from benchmarks.harness.client import ErrorEvents

EVICTED = (
    b'data: {"error": {"message": "stopped for a higher class", "type": "server_error",'
    b' "param": null, "code": "evicted"}}\n\n'
)
CHUNK = b'data: {"choices": [{"delta": {"content": "say \\"error\\""}}]}\n\n'


def call(status: int, code: str = "", events: int = 0) -> Call:
    c = Call(status=status, started=0.0)
    c.error_code, c.error_events = code, events
    return c


def test_an_eviction_is_told_by_its_event_or_by_a_429() -> None:
    assert low_outcome(call(-2, "evicted", 1)) == "evicted_event"
    assert low_outcome(call(429, "evicted")) == "evicted_429"
    assert low_outcome(call(429, "over_capacity")) == "refused"
    assert low_outcome(call(200)) == "completed"
    assert low_outcome(call(-1)) == "failed"
    assert low_outcome(call(CUT)) == "cut"


def test_each_client_is_told_exactly_one_outcome() -> None:
    assert outcomes_seen(call(200)) == 1
    assert outcomes_seen(call(-2, "evicted", 1)) == 1
    assert outcomes_seen(call(429, "evicted")) == 1
    # Two error events, or an answer and an error: two outcomes.
    assert outcomes_seen(call(-2, "evicted", 2)) == 2
    assert outcomes_seen(call(200, "evicted", 1)) == 2
    # A stream that broke off saying nothing: none.
    assert outcomes_seen(call(-2)) == 0
    assert outcomes_seen(call(-1)) == 0


def test_an_error_event_is_found_and_its_code_read() -> None:
    events = ErrorEvents()
    events.feed(CHUNK * 3)
    assert events.count == 0  # "error" in content is escaped
    events.feed(EVICTED)
    assert events.count == 1
    assert events.code() == "evicted"


def test_an_error_event_cut_across_chunks_is_found_once() -> None:
    stream = CHUNK + EVICTED
    for cut in range(1, len(stream)):
        events = ErrorEvents()
        events.feed(stream[:cut])
        events.feed(stream[cut:])
        assert events.count == 1, cut
        assert events.code() == "evicted", cut


def test_byte_by_byte_two_events_are_two() -> None:
    events = ErrorEvents()
    for i, byte in enumerate(CHUNK + EVICTED + EVICTED):
        events.feed(bytes([byte]))
        assert events.count <= 2, i
    assert events.count == 2
    assert events.code() == "evicted"
