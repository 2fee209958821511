"""Reading what an answer says it used, by its route's field names.

Every route's answer reports its usage in an object of counts: OpenAI's
``prompt_tokens`` / ``completion_tokens``, the Responses API's
``input_tokens`` / ``output_tokens`` (``app.routes.UsageNames``). Where the
object sits differs (a whole answer's top level, a stream's final chunk, a
completed response's event); what it says is read here, for all of them.
"""

import json

from app.record import RequestRecord
from app.routes import UsageNames


def take_usage(usage: object, names: UsageNames, record: RequestRecord) -> None:
    """Hand ``record`` the counts of a ``usage`` object (nothing, if it is
    not one)."""
    if isinstance(usage, dict):
        record.used(_count(usage.get(names.prompt)), _count(usage.get(names.output)))


def take_answer_usage(content: bytes, names: UsageNames, record: RequestRecord) -> None:
    """The usage at the top level of a whole (not streamed) answer."""
    try:
        answer = json.loads(content)
    except ValueError:
        return
    if isinstance(answer, dict):
        take_usage(answer.get("usage"), names, record)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
