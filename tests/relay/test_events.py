"""The SSE event splitter: whole events out, bytes untouched."""

import json

from hypothesis import given
from hypothesis import strategies as st

from app.relay.events import EventSplitter, event_json, has_content, split_events

# Characters that str.splitlines() (and httpx's aiter_lines) treat as line
# breaks but SSE does not; the engine writes them raw inside JSON strings.
NOT_SSE_LINE_BREAKS = "\u2028\u2029\u0085\x1c\x1d\x1e\x0b\x0c"


def chunk_event(text: str) -> bytes:
    payload = {"choices": [{"index": 0, "delta": {"content": text}}]}
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


def test_one_event_per_feed() -> None:
    splitter = EventSplitter()
    event = chunk_event("hello")
    assert splitter.feed(event) == event
    assert splitter.pending == b""


def test_event_split_across_reads_is_held_until_complete() -> None:
    splitter = EventSplitter()
    event = chunk_event("hello")
    assert splitter.feed(event[:10]) == b""
    assert splitter.feed(event[10:-1]) == b""
    assert splitter.feed(event[-1:]) == event


def test_several_events_in_one_read_come_out_together() -> None:
    splitter = EventSplitter()
    events = chunk_event("a") + chunk_event("b") + b"data: [DONE]\n\n"
    assert splitter.feed(events + b"data: {") == events
    assert splitter.pending == b"data: {"


def test_sse_line_ends_of_every_kind_end_events() -> None:
    for end in (b"\n\n", b"\r\n\r\n", b"\r\r", b"\r\n\n", b"\n\r\n"):
        splitter = EventSplitter()
        assert splitter.feed(b"data: x" + end) == b"data: x" + end, end


def test_a_crlf_split_between_reads_is_not_two_line_ends() -> None:
    splitter = EventSplitter()
    assert splitter.feed(b"data: x\r") == b""
    assert splitter.feed(b"\ndata: y") == b""
    assert splitter.feed(b"\r\n\r\n") == b"data: x\r\ndata: y\r\n\r\n"


def test_unicode_line_separators_inside_json_do_not_split() -> None:
    splitter = EventSplitter()
    event = chunk_event(f"a{NOT_SSE_LINE_BREAKS}b")
    out = splitter.feed(event)
    assert out == event
    assert list(split_events(out)) == [event]
    assert event_json(out)["choices"][0]["delta"]["content"] == f"a{NOT_SSE_LINE_BREAKS}b"


texts = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=20)


@given(st.lists(texts, min_size=1, max_size=8), st.lists(st.integers(1, 40), max_size=30))
def test_any_chunking_gives_back_the_same_bytes_in_whole_events(
    contents: list[str], cuts: list[int]
) -> None:
    stream = b"".join(chunk_event(text) for text in contents) + b"data: [DONE]\n\n"
    splitter = EventSplitter()
    out: list[bytes] = []
    position = 0
    for size in [*cuts, len(stream)]:
        piece = stream[position : position + size]
        position += len(piece)
        released = splitter.feed(piece)
        if released:
            assert released.endswith(b"\n\n")
            out.append(released)
    assert b"".join(out) == stream
    assert splitter.pending == b""
    assert len(list(split_events(b"".join(out)))) == len(contents) + 1


def test_has_content_skips_the_role_chunk() -> None:
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    token = {"choices": [{"index": 0, "delta": {"content": "x"}}]}
    text = {"choices": [{"index": 0, "text": "x"}]}
    assert not has_content(role)
    assert has_content(token)
    assert has_content(text)
    assert not has_content({"choices": [], "usage": {"completion_tokens": 3}})
    assert not has_content(None)


def test_event_json_ignores_done_and_comments() -> None:
    assert event_json(b"data: [DONE]\n\n") is None
    assert event_json(b": ping\n\n") is None
    assert event_json(b'data: {"a": 1}\n\n') == {"a": 1}
