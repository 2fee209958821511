"""Reading what an answer says it used, by its route's field names.

Every route's answer reports its usage in an object of counts: OpenAI's
``prompt_tokens`` / ``completion_tokens``, the Responses API's
``input_tokens`` / ``output_tokens`` (``app.request.routes.UsageNames``). Where the
object sits differs (a whole answer's top level, a stream's final chunk, a
completed response's event); what it says is read here, for all of them.
And what the engine says the request took, where it says it (vLLM's
``metrics`` beside the usage of a chat or completions answer, or of a
stream's final usage chunk, with ``--enable-per-request-metrics``).
"""

import json

from app.request.record import EngineTiming, RequestRecord
from app.request.routes import UsageNames

Counts = tuple[int | None, int | None]


def usage_counts(usage: object, names: UsageNames) -> Counts:
    """The prompt's and the output's tokens that a ``usage`` object says
    (None for what it does not say, or when it is not one)."""
    if not isinstance(usage, dict):
        return None, None
    parts = [count for name in names.prompt if (count := _count(usage.get(name))) is not None]
    return (sum(parts) if parts else None), _count(usage.get(names.output))


def answer_usage(content: bytes, names: UsageNames) -> Counts:
    """The usage at the top level of a whole (not streamed) answer."""
    return usage_counts(_usage_of(_parsed(content)), names)


def take_answer(content: bytes, names: UsageNames, record: RequestRecord) -> None:
    """Hand ``record`` what a whole answer says it used and took."""
    answer = _parsed(content)
    record.used(*usage_counts(_usage_of(answer), names))
    record.timed_by_engine(engine_timing(answer))


def take_usage(chunk: object, names: UsageNames, record: RequestRecord) -> None:
    """Hand ``record`` what a stream's usage chunk says it used and took."""
    usage = _usage_of(chunk)
    if isinstance(usage, dict):
        record.used(*usage_counts(usage, names))
    record.timed_by_engine(engine_timing(chunk))


def engine_timing(answer: object) -> EngineTiming | None:
    """What the engine says the request took, if the answer (or the final
    chunk) carries its per-request metrics, in seconds."""
    metrics = answer.get("metrics") if isinstance(answer, dict) else None
    if not isinstance(metrics, dict):
        return None
    queue = _milliseconds(metrics.get("queue_time_ms"))
    first = _milliseconds(metrics.get("time_to_first_token_ms"))
    if queue is None or first is None:
        return None
    return EngineTiming(queue, first, _milliseconds(metrics.get("generation_time_ms")))


def _parsed(content: bytes) -> object:
    try:
        return json.loads(content)
    except ValueError:
        return None


def _usage_of(answer: object) -> object:
    return answer.get("usage") if isinstance(answer, dict) else None


def _milliseconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        return None
    return value / 1000


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
