"""Traces in the CPU compose stack: one request through a gateway's published
port is one trace in the stack's trace backend, read back through its REST
API, from the gateway's server span down to vLLM's ``llm_request``; and the
exemplar Prometheus keeps of it opens that trace through Grafana's link."""

import json
import re
import time
from typing import Any

import httpx
import openai
import pytest

from tests.containers.compose import ROOT, ComposeProject
from tests.support.grafana import exemplar_link
from tests.support.trace_backend import TraceStore, client_traceparent, one, span_id, tree
from tests.support.wait import wait_until

# The first test also waits for the stack to come up (see conftest.HEALTHY_WITHIN).
pytestmark = pytest.mark.timeout(1800)

SERVER = "POST /v1/chat/completions"
# Both exporters send a batch every 5 s (OTEL_BSP_SCHEDULE_DELAY's default),
# Prometheus scrapes every 2 s: a minute is many times either.
ARRIVES_WITHIN = 60.0
# What the UI's page at its address for a trace id asks the backend (its
# route's loader, traceRedirectLoaderQuery): the trace's project, whose trace
# page it then opens.
TRACE_PROJECT = """
query ($traceOtelId: String!) {
  trace: getTraceByOtelId(traceId: $traceOtelId) { project { id } }
}
"""


def backend_url(stack: ComposeProject) -> str:
    """The trace backend's UI and REST API, on this host."""
    backend = stack.trace_backend()
    return f"http://127.0.0.1:{stack.published_port(backend.service, backend.port)}"


@pytest.fixture(scope="module")
def traced_request(stack: ComposeProject) -> tuple[str, str]:
    """One streamed chat completion through the first gateway, its client's
    ``traceparent`` sent along: the trace id and the client's span id."""
    header, trace_id, parent = client_traceparent()
    port = stack.gateway_port(stack.gateways()[0])
    with openai.OpenAI(
        base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", timeout=120
    ) as sdk:
        model = sdk.models.list().data[0].id
        stream = sdk.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Tell me about the river."}],
            max_tokens=8,
            stream=True,
            # The random-weight model may end at its first token otherwise.
            extra_body={"ignore_eos": True},
            extra_headers={"traceparent": header},
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    return trace_id, parent


def test_a_request_through_a_gateway_is_one_trace_into_the_engine(
    stack: ComposeProject, traced_request: tuple[str, str]
) -> None:
    trace_id, parent = traced_request
    spans = TraceStore(backend_url(stack)).wait_for_trace(
        trace_id, {SERVER, "queue", "engine call", "llm_request"}, timeout=ARRIVES_WITHIN
    )
    server, call = one(spans, SERVER), one(spans, "engine call")
    picture = tree(spans)
    # The client's span → the gateway's → its engine call → vLLM's.
    assert server["parent_id"] == parent, picture
    assert one(spans, "queue")["parent_id"] == span_id(server), picture
    assert call["parent_id"] == span_id(server), picture
    assert one(spans, "llm_request")["parent_id"] == span_id(call), picture
    print(f"\ntrace {trace_id}\n{picture}")


def ui_routes(ui: str) -> set[str]:
    """The absolute routes of the backend's UI (a single-page app: the
    server answers every path with the same page, and its script routes),
    read from the scripts the page loads."""
    page = httpx.get(f"{ui}/", timeout=10).text
    routes: set[str] = set()
    for source in re.findall(r'<script[^>]*\bsrc="(/[^"]+\.js)"', page):
        script = httpx.get(f"{ui}{source}", timeout=30).text
        routes |= set(re.findall(r"path:`(/[^`$]*)`", script))
    return routes


def route_of(path: str, routes: set[str]) -> str | None:
    """The route (``/a/:param``) that a path takes, if any."""
    for route in routes:
        pattern = re.sub(r":\w+", "[^/]+", re.escape(route).replace("\\:", ":"))
        if re.fullmatch(pattern, path):
            return route
    return None


def exemplar_queries() -> list[str]:
    """The gateway dashboard's exemplar queries, its variables filled in."""
    variables = {"$__rate_interval": "1m", "$model": ".*", "$tenant": ".*"}
    dashboard = json.loads((ROOT / "dashboards" / "gateway.json").read_text())
    queries = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets") or []:
            if target.get("exemplar"):
                expr = target["expr"]
                for variable, value in variables.items():
                    expr = expr.replace(variable, value)
                queries.append(expr)
    return queries


def exemplar_trace_ids(prometheus: str, expr: str) -> set[str]:
    end = time.time()
    reply = httpx.get(
        f"{prometheus}/api/v1/query_exemplars",
        params={"query": expr, "start": end - 3600, "end": end},
        timeout=10,
    ).json()
    assert reply["status"] == "success", reply
    series: list[dict[str, Any]] = reply["data"]
    return {e["labels"]["trace_id"] for s in series for e in s["exemplars"]}


def test_an_exemplar_of_the_request_opens_its_trace(
    stack: ComposeProject, traced_request: tuple[str, str]
) -> None:
    trace_id, _ = traced_request
    (prometheus,) = [
        name
        for name in stack.runnable()
        if "--enable-feature=exemplar-storage" in stack.services[name].get("command", [])
    ]
    prometheus_url = f"http://127.0.0.1:{stack.published_port(prometheus, 9090)}"
    queries = exemplar_queries()
    assert queries
    for expr in queries:

        def held(expr: str = expr) -> bool:
            return trace_id in exemplar_trace_ids(prometheus_url, expr)

        assert wait_until(held, timeout=ARRIVES_WITHIN, interval=1), (
            f"{expr}: no exemplar of trace {trace_id}"
        )

    # Grafana's link from that exemplar, with TRACES_UI_URL set to where this
    # stack publishes the backend's UI (a free port here, not the default).
    ui = backend_url(stack)
    environ = {**stack.services["grafana"]["environment"], "TRACES_UI_URL": ui}
    link = exemplar_link("trace_id", trace_id, {k: str(v) for k, v in environ.items()})
    assert link.startswith(f"{ui}/")
    path = link.removeprefix(ui)
    # An address the running UI routes: the one for a trace by its id.
    routes = ui_routes(ui)
    assert route_of(path, routes) == "/redirects/traces/:trace_otel_id", sorted(routes)
    assert path.rsplit("/", 1)[-1] == trace_id
    # What that page does in the browser: finds the trace's project (and
    # opens the trace there).
    answer = httpx.post(
        f"{ui}/graphql",
        json={"query": TRACE_PROJECT, "variables": {"traceOtelId": trace_id}},
        timeout=10,
    ).json()
    assert not answer.get("errors"), answer
    assert answer["data"]["trace"]["project"]["id"]
