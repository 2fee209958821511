"""Reading what an answer says it used, by its route's field names.

Every route's answer reports its usage in an object of counts: OpenAI's
``prompt_tokens`` / ``completion_tokens``, the Responses API's
``input_tokens`` / ``output_tokens`` (``app.request.routes.UsageNames``). Where the
object sits differs (a whole answer's top level, a stream's final chunk, a
completed response's event); what it says is read here, for all of them.
"""

import json

from app.request.record import RequestRecord
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
    try:
        answer = json.loads(content)
    except ValueError:
        return None, None
    return usage_counts(answer.get("usage") if isinstance(answer, dict) else None, names)


def take_usage(usage: object, names: UsageNames, record: RequestRecord) -> None:
    """Hand ``record`` what a ``usage`` object says, if it is one."""
    if isinstance(usage, dict):
        record.used(*usage_counts(usage, names))


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
