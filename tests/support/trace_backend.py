"""The real trace backend for the tests: the project's launcher
(``deploy/traces/run.sh``, Arize Phoenix) on free ports, and its REST API
read back as spans.

One backend per test session (tests/conftest.py): the session's engine
exports its ``llm_request`` spans to it over OTLP/gRPC, a traced gateway its
own over OTLP/HTTP. Spans arrive when their exporters' batches go out, so a
test waits for the spans it expects (``wait_for_trace``). The stacks' own
backends (``make up``'s, compose's) are read the same way (``TraceStore``).
"""

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from deploy.local import ManagedProcess, free_port
from tests.support.wait import wait_until

# Phoenix keeps spans per project; spans that name none (everything here)
# go to this one.
PROJECT = "default"

Span = dict[str, Any]


@dataclass
class TraceStore:
    """A running backend's REST API at ``url``, whoever started it."""

    url: str

    def spans(self, trace_id: str) -> list[Span]:
        """Every span the backend holds of one trace (hex trace id)."""
        found: list[Span] = []
        cursor: str | None = None
        while True:
            params: dict[str, str | int] = {"trace_id": trace_id, "limit": 1000}
            if cursor:
                params["cursor"] = cursor
            answer = httpx.get(f"{self.url}/v1/projects/{PROJECT}/spans", params=params, timeout=10)
            if answer.status_code == 404:  # no span has reached the project yet
                return found
            answer.raise_for_status()
            body = answer.json()
            found.extend(body["data"])
            cursor = body.get("next_cursor")
            if not cursor:
                return found

    def retention_days(self) -> float | None:
        """After how many days the backend deletes a trace (its default
        project's retention policy; None: another kind of rule)."""
        query = "{ defaultProjectTraceRetentionPolicy { rule {"
        query += " ... on TraceRetentionRuleMaxDays { maxDays } } } }"
        answer = httpx.post(f"{self.url}/graphql", json={"query": query}, timeout=10)
        answer.raise_for_status()
        rule = answer.json()["data"]["defaultProjectTraceRetentionPolicy"]["rule"]
        days = rule.get("maxDays")
        return None if days is None else float(days)

    def wait_for_trace(self, trace_id: str, names: set[str], timeout: float = 60) -> list[Span]:
        """The trace's spans once one of each name in ``names`` has arrived."""
        held: list[Span] = []

        def arrived() -> bool:
            held[:] = self.spans(trace_id)
            return names <= {span["name"] for span in held}

        assert wait_until(arrived, timeout=timeout, interval=0.5), (
            f"trace {trace_id}: {sorted(names)} expected, got {sorted(s['name'] for s in held)}"
        )
        return held


@dataclass
class TraceBackend(TraceStore):
    """The session's backend: its gRPC port and its process."""

    grpc_port: int
    process: ManagedProcess

    @property
    def otlp_http_traces(self) -> str:
        """Where OTLP/HTTP exporters send spans (the full traces path)."""
        return f"{self.url}/v1/traces"

    @property
    def otlp_grpc(self) -> str:
        return f"http://127.0.0.1:{self.grpc_port}"

    def gateway_environ(self) -> dict[str, str]:
        """What a gateway exports its traces here with (the standard
        variables): OTLP/HTTP, batches sent every 200 ms."""
        return {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": self.otlp_http_traces,
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        }


def client_traceparent() -> tuple[str, str, str]:
    """A sampled W3C ``traceparent`` as a client would send it: the header,
    its trace id and its span id."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def one(spans: list[Span], name: str) -> Span:
    """The one span of that name in a trace."""
    named = [span for span in spans if span["name"] == name]
    assert len(named) == 1, f"one {name!r} span expected:\n{tree(spans)}"
    return named[0]


def span_id(span: Span) -> str:
    return str(span["context"]["span_id"])


@contextmanager
def running_trace_backend(log_dir: Path) -> Iterator[TraceBackend]:
    """The backend on free ports, once healthy; stopped (its process group)
    on exit."""
    port, grpc_port = free_port(), free_port()
    env = {
        "TRACES_PORT": str(port),
        "TRACES_GRPC_PORT": str(grpc_port),
        "TRACES_DIR": str(log_dir / "data"),
    }
    proc = ManagedProcess("traces", ["nice", "-n", "10", "deploy/traces/run.sh"], env, log_dir)
    try:
        url = f"http://127.0.0.1:{port}"
        proc.wait_http(f"{url}/healthz", timeout=300)
        yield TraceBackend(url, grpc_port, proc)
    finally:
        proc.stop()


def tree(spans: list[Span]) -> str:
    """The spans as an indented tree (name, span id, duration), for a
    failing assertion's message and for reading a trace."""
    from datetime import datetime

    by_parent: dict[str | None, list[Span]] = {}
    ids = {span["context"]["span_id"] for span in spans}
    for span in spans:
        parent = span["parent_id"] if span["parent_id"] in ids else None
        by_parent.setdefault(parent, []).append(span)
    lines: list[str] = []

    def walk(parent: str | None, depth: int) -> None:
        for span in sorted(by_parent.get(parent, []), key=lambda s: str(s["start_time"])):
            took = datetime.fromisoformat(span["end_time"]) - datetime.fromisoformat(
                span["start_time"]
            )
            lines.append(
                f"{'  ' * depth}{span['name']}  {span['context']['span_id']}"
                f"  {took.total_seconds() * 1000:.1f} ms"
            )
            walk(span["context"]["span_id"], depth + 1)

    walk(None, 0)
    return "\n".join(lines)
