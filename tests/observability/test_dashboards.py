"""The dashboards: generated from code, well formed, and built on real series."""

import json
import re
from typing import Any

import pytest
from prometheus_client.metrics import MetricWrapperBase

from app.observe.metrics import GatewayMetrics
from dashboards import build
from deploy.local import ROOT
from tests.observability.test_rules import recording_rules

DASHBOARDS = ROOT / "dashboards"
SERIES = re.compile(r"\b(?:gateway_[a-z_]+|vllm:[a-z_]+|[a-z_]+:[a-z_]+:[a-z0-9_]+)")


def load(name: str) -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads((DASHBOARDS / name).read_text())
    return dashboard


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every query of every panel."""
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets") or []
    ]


_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def gateway_series() -> set[str]:
    """Every series name the gateway can export: labelled ones without
    children included (per-engine and per-tenant series appear only once they
    exist), and metrics registered only when their feature is configured."""
    gateway = GatewayMetrics()
    # Its metrics, and those of the groups it holds (the per-model series).
    holders = [
        gateway,
        *(v for v in vars(gateway).values() if type(v).__module__.startswith("app.")),
    ]
    metrics = [
        m for holder in holders for m in vars(holder).values() if isinstance(m, MetricWrapperBase)
    ]
    return {
        family.name + suffix
        for metric in metrics
        for family in metric.describe()
        for suffix in _SUFFIXES.get(family.type, ("",))
    }


@pytest.mark.parametrize("name", sorted(build.DASHBOARDS))
def test_the_json_is_what_the_code_generates(name: str) -> None:
    expected = build.render(build.DASHBOARDS[name]())
    assert (DASHBOARDS / name).read_text() == expected, "run: python -m dashboards.build"


@pytest.mark.parametrize("name", sorted(build.DASHBOARDS))
def test_panels_use_the_variables_and_real_series(name: str) -> None:
    dashboard = load(name)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["model"]["type"] == "query"
    assert dashboard["uid"]
    assert dashboard["title"]

    rules = recording_rules()
    known = gateway_series()
    panel_ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(set(panel_ids)) == len(panel_ids)
    for panel in dashboard["panels"]:
        if panel.get("targets"):
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
    for title, expr in queries(dashboard):
        assert "vector(" not in expr, title
        assert "absent(" not in expr, title
        # Windows come from Grafana ($__rate_interval) or from the rules.
        assert not re.search(r"\[\d+[smhd]\]", expr), title
        used = SERIES.findall(expr)
        assert used, f"{title}: no gateway_* or vllm:* series in {expr}"
        for series in used:
            if series.startswith("gateway_"):
                assert series in known, f"{title}: {series} is not a gateway metric"
            elif not series.startswith("vllm:"):
                assert series in rules, f"{title}: {series} is not a recording rule"
        if "vllm:" in expr or "model_name:" in expr:
            assert "$model" in expr, f"{title}: engine series without the model variable"


def test_the_gateway_dashboard_picks_tenants_of_the_keys_file() -> None:
    dashboard = load("gateway.json")
    tenant = {v["name"]: v for v in dashboard["templating"]["list"]}["tenant"]
    assert tenant["type"] == "query"
    assert tenant["query"] == "label_values(gateway_tenant_tokens_total, tenant)"
    assert tenant["datasource"]["uid"] == "${datasource}"
    assert tenant["includeAll"] is True
    assert tenant["allValue"] == ".*"
    per_tenant = [(t, e) for t, e in queries(dashboard) if "gateway_tenant_" in e]
    assert per_tenant, "no per-tenant panels"
    for title, expr in per_tenant:
        assert 'tenant=~"$tenant"' in expr, f"{title}: per-tenant series without the variable"


def test_there_are_three_dashboards_with_distinct_uids() -> None:
    uids = {load(name)["uid"] for name in build.DASHBOARDS}
    assert uids == {"vllm-gateway", "vllm-engine", "vllm-degradation"}
