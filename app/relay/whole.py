"""What a whole (not streamed) answer says about its request: its usage."""

import json

from app.record import RequestRecord


def read_usage(content: bytes, record: RequestRecord, route: str) -> None:
    """The usage of a whole answer, in OpenAI's names or, for the Responses
    API, in its own (``input_tokens``, ``output_tokens``)."""
    try:
        usage = json.loads(content).get("usage")
    except (ValueError, AttributeError):
        return
    if not isinstance(usage, dict):
        return
    prompt, completion = "prompt_tokens", "completion_tokens"
    if route == "responses":
        prompt, completion = "input_tokens", "output_tokens"
    record.prompt_tokens = usage.get(prompt)
    record.completion_tokens = usage.get(completion)
