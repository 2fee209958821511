"""No pod of deploy/k8s/ gets the Services' variables. The kubelet injects
``<SERVICE>_PORT=tcp://…`` and the like for every Service of the namespace
unless the pod spec says ``enableServiceLinks: false``: a Service named
``gateway…`` would put ``GATEWAY_PORT=tcp://…`` into the gateway's own
settings, and the ``vllm-…`` Services put ``VLLM_…`` variables into vLLM's.
Every workload finds the others by DNS instead."""

import pytest

from tests.deploy.k8s_manifests import OVERLAYS, Rendered, render_overlay


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request: pytest.FixtureRequest) -> Rendered:
    return render_overlay(request.param)


def test_no_pod_gets_the_services_variables(rendered: Rendered) -> None:
    templates = list(rendered.pod_templates())
    assert {workload["metadata"]["name"] for workload, _ in templates} == {
        "vllm-gateway",
        "vllm-engine",
        "vllm-gateway-redis",
    }
    for workload, template in templates:
        name = workload["metadata"]["name"]
        assert template["spec"].get("enableServiceLinks") is False, name


def test_the_gateways_settings_name_no_service_variable(rendered: Rendered) -> None:
    """What the gateway reads comes from its ConfigMap, by name, and its one
    secret setting from a Secret's key, by name: nothing from the Services."""
    (gateway,) = [t for w, t in rendered.pod_templates() if w["metadata"]["name"] == "vllm-gateway"]
    (container,) = gateway["spec"]["containers"]
    env = container.get("env", [])
    # Settings belong in the ConfigMap; the engine key alone in a Secret.
    assert [e["name"] for e in env] == ["GATEWAY_UPSTREAM_API_KEY"]
    assert env[0]["valueFrom"].keys() == {"secretKeyRef"}
    assert [source.keys() for source in container["envFrom"]] == [{"configMapRef"}]
