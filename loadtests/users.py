"""Locust users modelled on real workloads, streaming over SSE.

Every request is a streaming chat completion. Besides locust's own row for
the HTTP call, each request reports its time to first token ("TTFT") and its
mean inter-token gap ("ITL") as rows of their own in locust's statistics, and
appends one JSON line to ``LOAD_RECORDS`` (when set) for the run report.

Refused requests (429/503) wait for ``Retry-After`` before the user's next
request, as a well-behaved client does.

Variables: ``LOAD_MODEL`` (default: the first model the target lists),
``LOAD_MAX_TOKENS`` (256), ``LOAD_IGNORE_EOS`` (1 for fixed lengths; 0 for
natural ones), ``LOAD_RECORDS`` (a file path). The two classes' users
(``PriorityChatUser``, ``BulkUser``) also read ``LOAD_BODY_PRIORITY`` (1:
their class's priority in the body, for vLLM straight, as the gateway would
set it) and ``LOAD_SLO_MS_CHAT`` / ``LOAD_SLO_MS_BULK`` (a TTFT objective,
sent as ``x-slo-ttft-ms`` and recorded, so the report counts what missed it).
"""

import json
import os
import random
import time
from typing import Any, ClassVar

from locust import HttpUser, constant, events, task
from locust.env import Environment

from loadtests.meter import StreamMeter
from loadtests.prompts import Messages, PromptFactory

_prompts = PromptFactory(seed=int(os.environ.get("LOAD_SEED", "0")))
_settings: dict[str, Any] = {}
_records: Any = None


@events.test_start.add_listener
def _on_start(environment: Environment, **_: Any) -> None:
    global _records
    model = os.environ.get("LOAD_MODEL")
    if not model:
        import requests

        listed = requests.get(
            f"{environment.host}/v1/models", headers=auth_headers(), timeout=10
        ).json()
        model = listed["data"][0]["id"]
    _settings.update(
        model=model,
        max_tokens=int(os.environ.get("LOAD_MAX_TOKENS", "256")),
        ignore_eos=os.environ.get("LOAD_IGNORE_EOS", "1") == "1",
        body_priority=os.environ.get("LOAD_BODY_PRIORITY", "0") == "1",
    )
    path = os.environ.get("LOAD_RECORDS")
    if path:
        _records = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        _records.write(json.dumps({"event": "test_start", "t": time.time()}) + "\n")


@events.test_stop.add_listener
def _on_stop(**_: Any) -> None:
    if _records is not None:
        _records.close()


def auth_headers() -> dict[str, str]:
    """``LOAD_API_KEY``: the key every user sends (a gateway with a keys
    file answers keyless requests 401)."""
    key = os.environ.get("LOAD_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


class StreamingUser(HttpUser):
    abstract = True
    wait_time = constant(0)
    label = "chat"
    max_tokens: ClassVar[int | None] = None
    # Leave after this many tokens (None: read to the end).
    abandon_after: ClassVar[tuple[int, int] | None] = None

    def messages(self) -> Messages:
        raise NotImplementedError

    def headers(self) -> dict[str, str]:
        return {}

    def extra_body(self) -> dict[str, Any]:
        return {}

    def objective(self) -> float | None:
        """The TTFT this user's requests are promised, seconds (None: none)."""
        return None

    @task
    def stream(self) -> None:
        body = {
            "model": _settings["model"],
            "messages": self.messages(),
            "max_tokens": self.max_tokens or _settings["max_tokens"],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if _settings["ignore_eos"]:
            body["ignore_eos"] = True
        body.update(self.extra_body())
        leave_at = random.randint(*self.abandon_after) if self.abandon_after else None
        wall = time.time()
        meter = StreamMeter(started=time.perf_counter())
        status, abandoned, error = 0, False, None
        retry_after: str | None = None
        try:
            with self.client.post(
                "/v1/chat/completions",
                json=body,
                headers={**auth_headers(), **self.headers()},
                stream=True,
                catch_response=True,
                name=self.label,
            ) as response:
                status = response.status_code
                if status != 200:
                    response.failure(f"{status}")
                    retry_after = response.headers.get("retry-after")
                else:
                    for chunk in response.iter_content(chunk_size=None):
                        meter.feed(chunk, time.perf_counter())
                        if leave_at is not None and meter.content_events >= leave_at:
                            abandoned = True
                            response.close()
                            break
                    response.success()
        except Exception as exc:  # connection errors are data for the report
            error = repr(exc)
        self._report(meter, wall, status, abandoned, error)
        if retry_after is not None:
            # A well-behaved client: come back when the gateway says.
            time.sleep(min(float(retry_after), 60.0))

    def _report(
        self, meter: StreamMeter, wall: float, status: int, abandoned: bool, error: str | None
    ) -> None:
        for kind, seconds in (("TTFT", meter.ttft), ("ITL", meter.mean_gap)):
            if seconds is not None:
                self.environment.events.request.fire(
                    request_type=kind,
                    name=self.label,
                    response_time=seconds * 1000,
                    response_length=0,
                    exception=None,
                    context={},
                )
        if _records is not None:
            _records.write(
                json.dumps(
                    {
                        "user": self.label,
                        "start": wall,
                        "end": time.time(),
                        "status": status,
                        "ttft": meter.ttft,
                        "itl": meter.mean_gap,
                        "tokens": meter.tokens,
                        "abandoned": abandoned,
                        "error": error,
                        "slo": self.objective(),
                    }
                )
                + "\n"
            )


class ChatUser(StreamingUser):
    """Short questions after a shared system prompt (cached by the engine)."""

    weight = 4
    label = "chat"

    def messages(self) -> Messages:
        return _prompts.chat()


class RAGUser(StreamingUser):
    """A long shared document, then a varied question: prefix caching's best case."""

    weight = 2
    label = "rag"

    def messages(self) -> Messages:
        return _prompts.rag()


class SummaryUser(StreamingUser):
    """A long document of its own, a short answer: all prefill, nothing shared."""

    weight = 1
    label = "summary"
    max_tokens = 32

    def messages(self) -> Messages:
        return _prompts.summary()


class AbandoningUser(StreamingUser):
    """Leaves mid-stream at a random point, as impatient users do."""

    weight = 1
    label = "abandon"
    abandon_after = (1, 64)

    def messages(self) -> Messages:
        return _prompts.chat()


class TenantMixUser(StreamingUser):
    """Several tenants and priorities, as a shared deployment sees them."""

    weight = 2
    label = "tenants"
    TENANTS = ("acme", "acme", "acme", "globex", "initech")
    PRIORITIES = ("high", "normal", "normal", "low")

    def messages(self) -> Messages:
        return _prompts.chat()

    def headers(self) -> dict[str, str]:
        return {
            "X-Tenant-Id": random.choice(self.TENANTS),
            "X-Priority": random.choice(self.PRIORITIES),
        }


class ClassUser(StreamingUser):
    """A user of one service class: its ``X-Priority`` to the gateway, which
    orders its queue by it and hands the class's priority on to vLLM. Straight
    at vLLM (``LOAD_BODY_PRIORITY=1``) the body carries that priority itself
    (lower runs first under ``--scheduling-policy priority``), so vLLM alone
    gets the same order to work with; an engine run with ``fcfs`` refuses a
    non-zero one, so it is sent only when asked."""

    abstract = True
    priority: ClassVar[str] = "normal"
    engine_priority: ClassVar[int] = 0

    def headers(self) -> dict[str, str]:
        headers = {"X-Priority": self.priority}
        objective = os.environ.get(f"LOAD_SLO_MS_{self.label.upper()}")
        if objective:
            headers["x-slo-ttft-ms"] = objective
        return headers

    def extra_body(self) -> dict[str, Any]:
        return {"priority": self.engine_priority} if _settings.get("body_priority") else {}

    def objective(self) -> float | None:
        objective = os.environ.get(f"LOAD_SLO_MS_{self.label.upper()}")
        return int(objective) / 1000 if objective else None


class PriorityChatUser(ClassUser):
    """Interactive chat: short answers, a person reading between them."""

    weight = 1
    label = "chat"
    priority = "high"
    engine_priority = -1
    max_tokens = 24
    wait_time = constant(0.3)

    def messages(self) -> Messages:
        return _prompts.chat()


class BulkUser(ClassUser):
    """Batch work: a passage of its own to rewrite at length, back to back."""

    weight = 1
    label = "bulk"
    priority = "low"
    engine_priority = 1
    max_tokens = 200

    def messages(self) -> Messages:
        return _prompts.bulk()
