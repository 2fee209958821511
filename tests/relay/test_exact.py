"""A stream charged to a key (``app.relay.exact``): the engine's usage in
every chunk is read and cut out again, so the client gets, byte for byte,
the stream the engine writes without it; a stream cut short is counted
from the last usage of each choice. The chunks are vLLM 0.32's own, as it
wrote them for one chat request with and without ``continuous_usage_stats``
(the same request, so the same id; only the usage differs)."""

from app.observe.metrics import GatewayMetrics
from app.relay.exact import ExactUsageRelay
from app.request.record import RequestRecord, Telemetry
from app.request.routes import OPENAI_USAGE

HEAD = b'data: {"id":"chatcmpl-a8c0","object":"chat.completion.chunk","created":1796174034,"model":"tiny","choices":[{"index":0,'  # noqa: E501
ROLE = b'"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]'
STEP = b'"delta":{"content":"ab"},"logprobs":null,"finish_reason":null,"token_ids":null}]'
LAST = b'"delta":{"content":"cd"},"logprobs":null,"finish_reason":"length","stop_reason":null,"token_ids":null}]'  # noqa: E501
PROMPT_IDS = b',"prompt_token_ids":null,"prompt_text":null}\n\n'
USAGE_CHUNK = b'data: {"id":"chatcmpl-a8c0","object":"chat.completion.chunk","created":1796174034,"model":"tiny","choices":[],"usage":{"prompt_tokens":6,"total_tokens":10,"completion_tokens":4},"system_fingerprint":"vllm-0.32.0-9c4e7ae3"}\n\n'  # noqa: E501
DONE = b"data: [DONE]\n\n"


def usage(completion: int, index_prompt: int = 6) -> bytes:
    return (
        b',"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,'
        b'"completion_tokens_details":null}' % (index_prompt, index_prompt + completion, completion)
    )


# What the engine writes with continuous usage stats, and without them.
WITH_USAGE = [
    HEAD + ROLE + usage(0) + PROMPT_IDS,
    HEAD + STEP + usage(2) + b"}\n\n",
    HEAD + LAST + usage(4) + b"}\n\n",
    USAGE_CHUNK,
    DONE,
]
WITHOUT = [
    HEAD + ROLE + PROMPT_IDS,
    HEAD + STEP + b"}\n\n",
    HEAD + LAST + b"}\n\n",
    USAGE_CHUNK,
    DONE,
]


def relay(
    forward_usage: bool, forward_chunk_usage: bool = False, prompts: int = 1
) -> tuple[ExactUsageRelay, RequestRecord]:
    metrics = GatewayMetrics()
    record = RequestRecord("r", "chat", Telemetry(metrics))
    return (
        ExactUsageRelay(
            record,
            metrics,
            usage=OPENAI_USAGE,
            forward_usage=forward_usage,
            forward_chunk_usage=forward_chunk_usage,
            prompts=prompts,
        ),
        record,
    )


def relayed(r: ExactUsageRelay, parts: list[bytes]) -> bytes:
    return b"".join(r.feed(part, 1.0 + i) for i, part in enumerate(parts))


def test_the_client_gets_the_stream_the_engine_writes_without_chunk_usage() -> None:
    with_usage_chunk, _ = relay(forward_usage=True)
    assert relayed(with_usage_chunk, WITH_USAGE) == b"".join(WITHOUT)
    without_usage_chunk, _ = relay(forward_usage=False)
    assert relayed(without_usage_chunk, WITH_USAGE) == b"".join(
        part for part in WITHOUT if part != USAGE_CHUNK
    )


def test_events_split_anywhere_come_out_the_same() -> None:
    whole = b"".join(WITH_USAGE)
    r, record = relay(forward_usage=True)
    pieces = [whole[i : i + 7] for i in range(0, len(whole), 7)]
    assert relayed(r, pieces) == b"".join(WITHOUT)
    r.finish()
    assert (record.prompt_tokens, record.completion_tokens) == (6, 4)


def test_a_client_that_asked_for_chunk_usage_gets_it() -> None:
    r, _ = relay(forward_usage=True, forward_chunk_usage=True)
    assert relayed(r, WITH_USAGE) == b"".join(WITH_USAGE)


def test_a_stream_cut_short_counts_what_the_engine_last_reported() -> None:
    r, record = relay(forward_usage=False)
    relayed(r, WITH_USAGE[:2])
    r.count_partial_output()
    # Two tokens in the one content chunk sent, not one per chunk.
    assert (record.prompt_tokens, record.completion_tokens) == (6, 2)


def test_each_choice_counts_its_own_last_usage() -> None:
    """With n = 2 (or a batch of prompts) each chunk's usage is its choice's."""
    second = HEAD.replace(b'"index":0,', b'"index":1,')
    r, record = relay(forward_usage=False, prompts=1)
    relayed(
        r,
        [
            HEAD + STEP + usage(3) + b"}\n\n",
            second + STEP + usage(5) + b"}\n\n",
            HEAD + STEP + usage(4) + b"}\n\n",
        ],
    )
    r.count_partial_output()
    assert record.completion_tokens == 4 + 5
    assert record.prompt_tokens == 6


def test_a_usage_with_an_object_of_counts_inside_is_cut_out_whole() -> None:
    """vLLM's usage may hold one object of counts (the prompt's cached
    tokens): the cut ends at the usage's own closing brace."""
    nested = (
        b',"usage":{"prompt_tokens":6,"total_tokens":8,"completion_tokens":2,'
        b'"prompt_tokens_details":{"cached_tokens":4}}'
    )
    r, _ = relay(forward_usage=False)
    sent = r.feed(HEAD + STEP + nested + b"}\n\n", 1.0)
    assert sent == HEAD + STEP + b"}\n\n"


def test_a_stream_hands_on_by_the_tokens_its_chunks_say() -> None:
    """Two tokens an event, as the engine's usage says, one event every
    0.2 s toward 100 tokens: due within 1 s at the 45th event (10 tokens
    left), with nothing learned of what an event carries (one each)."""
    r, _ = relay(forward_usage=False)
    called: list[int] = []
    r.ending_within(lambda: 1.0, 100, lambda: called.append(1))
    for i in range(44):
        r.feed(HEAD + STEP + usage(2 * (i + 1)) + b"}\n\n", 0.2 * i)
    assert called == []
    r.feed(HEAD + STEP + usage(90) + b"}\n\n", 0.2 * 44)
    assert called == [1]
