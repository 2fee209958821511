"""The Kubernetes manifests (deploy/k8s/), checked offline: there is no
cluster here. Each overlay is rendered as a user renders it (`kubectl
kustomize`); the rendered objects are validated against the Kubernetes API
schemas (kubernetes-validate) and the custom resources against the CRD
schemas of KEDA and the Prometheus Operator (tests/deploy/data/crds/); then
everything the manifests assert about the project — images, ports, probe
paths, environment variables, label selectors, the drain arithmetic, the
metrics the autoscalers read — is checked against the compose files, the
Dockerfiles and the code.
"""

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from app.engine.cold_models import parse_cold_models
from app.main import create_app
from app.observe.metrics import GatewayMetrics
from app.settings import Settings
from deploy.k8s import prometheusrule
from tests.deploy.compose_files import (
    ROOT,
    Compose,
    Resolved,
    image_tag,
    required_tool,
)
from tests.deploy.k8s_manifests import (
    K8S,
    OVERLAYS,
    Manifest,
    Rendered,
    render_composed,
    render_overlay,
)

NAMESPACE = "vllm-gateway"
GATEWAY = ("Deployment", "vllm-gateway")
ENGINE = ("Deployment", "vllm-engine")
REDIS = ("Deployment", "vllm-gateway-redis")
SETTINGS = "vllm-gateway-settings"
# The overlay a variant of it is rendered from, and the compose variant its
# engine is checked against.
RENDERS = {"gpu": "gpu", "cpu": "cpu", "gpu-hpa": "gpu", "gpu-zero": "gpu", "gpu-batches": "gpu"}
# The components a variant is composed of (instead of an overlay's own).
COMPOSED = {
    "gpu-hpa": ["components/monitoring", "components/autoscaling-hpa"],
    "gpu-zero": [
        "components/monitoring",
        "components/autoscaling-keda",
        "components/scale-from-zero",
    ],
    "gpu-batches": [
        "components/monitoring",
        "components/autoscaling-keda",
        "components/batches-shared",
    ],
}
# Kubernetes versions the built-in objects are validated against: an older
# cluster still in service, and the newest schemas kubernetes-validate ships.
KUBERNETES_VERSIONS = ("1.29", kubernetes_validate.utils.latest_version())
CRDS = ROOT / "tests" / "deploy" / "data" / "crds"
CRD_SCHEMAS = {
    ("keda.sh/v1alpha1", "ScaledObject"): CRDS / "keda.sh_scaledobjects.v1alpha1.json",
    ("monitoring.coreos.com/v1", "PodMonitor"): CRDS / "monitoring.coreos.com_podmonitors.v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): CRDS
    / "monitoring.coreos.com_prometheusrules.v1.json",
}
GATEWAY_DOCKERFILE = ROOT / "Dockerfile"
ENGINE_DOCKERFILE = ROOT / "deploy" / "engine" / "Dockerfile.cpu"
ENGINE_LAUNCHER = ROOT / "deploy" / "engine" / "run-cpu.sh"
ADAPTER_VALUES = K8S / "components" / "autoscaling-hpa" / "prometheus-adapter-values.yaml"


# --- rendering ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def renders() -> dict[str, Rendered]:
    found: dict[str, Rendered] = {}
    for name in (*OVERLAYS, *COMPOSED):
        started = time.monotonic()
        if name in COMPOSED:
            found[name] = render_composed(
                name, COMPOSED[name], [f"overlays/{RENDERS[name]}/engine-gpu.yaml"]
            )
        else:
            found[name] = render_overlay(name)
        print(f"\nkubectl kustomize {name}: {time.monotonic() - started:.2f} s")
    return found


@pytest.fixture(params=sorted(RENDERS))
def rendered(request: pytest.FixtureRequest, renders: dict[str, Rendered]) -> Rendered:
    return renders[request.param]


@pytest.fixture(scope="module")
def compose(tmp_path_factory: pytest.TempPathFactory) -> Compose:
    env_file = tmp_path_factory.mktemp("compose") / "empty.env"
    env_file.write_text("")
    return Compose(required_tool("docker-compose"), env_file)


def compose_for(rendered: Rendered, compose: Compose) -> Resolved:
    return compose.resolved(RENDERS[rendered.name])


def workload(rendered: Rendered, which: tuple[str, str]) -> Manifest:
    return rendered.get(*which)


def template(rendered: Rendered, which: tuple[str, str]) -> Manifest:
    found: Manifest = workload(rendered, which)["spec"]["template"]
    return found


def only_container(rendered: Rendered, which: tuple[str, str]) -> Manifest:
    found: list[Manifest] = template(rendered, which)["spec"]["containers"]
    assert len(found) == 1, f"{which[1]}: {len(found)} containers"
    return found[0]


def named_port(manifest: Manifest, name: str) -> int:
    (port,) = [p["containerPort"] for p in manifest.get("ports", []) if p.get("name") == name]
    return int(port)


def settings_env(rendered: Rendered) -> dict[str, str]:
    data: dict[str, str] = rendered.config_map(SETTINGS)["data"]
    return data


def gateway_settings(rendered: Rendered, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The ConfigMap, read as the gateway reads its environment."""
    with monkeypatch.context() as patch:
        for key in list(os.environ):
            if key.startswith("GATEWAY_"):
                patch.delenv(key)
        for key, value in settings_env(rendered).items():
            patch.setenv(key, value)
        return Settings()


def sleep_seconds(container_spec: Manifest) -> float:
    command = container_spec["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep", command
    assert len(command) == 2, command
    return float(command[1])


def has_autoscaler(rendered: Rendered) -> bool:
    return bool(rendered.of_kind("ScaledObject") or rendered.of_kind("HorizontalPodAutoscaler"))


def test_every_overlay_renders(renders: dict[str, Rendered]) -> None:
    kinds = {name: {m["kind"] for m in r.manifests} for name, r in renders.items()}
    workloads = {"ConfigMap", "Service", "Deployment", "PodDisruptionBudget"}
    monitoring = {"PodMonitor", "PrometheusRule"}
    assert kinds["cpu"] == workloads
    assert kinds["gpu"] == workloads | monitoring | {"ScaledObject"}
    assert kinds["gpu-hpa"] == workloads | monitoring | {"HorizontalPodAutoscaler"}
    for r in renders.values():
        for manifest in r.manifests:
            assert manifest["metadata"].get("namespace") == NAMESPACE, manifest["metadata"]


# --- schemas -----------------------------------------------------------------------


def is_custom(manifest: Manifest) -> bool:
    return (manifest["apiVersion"], manifest["kind"]) in CRD_SCHEMAS


def test_objects_validate_against_the_kubernetes_api_schemas(rendered: Rendered) -> None:
    """Strict: an unknown or misspelled field fails, as a server-side apply
    with strict field validation would."""
    for manifest in rendered.manifests:
        if is_custom(manifest):
            continue
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(manifest, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                name = f"{manifest['kind']}/{manifest['metadata']['name']}"
                pytest.fail(f"{name} on Kubernetes {version}: {error.message} at {error.path}")


def structural(schema: dict[str, Any]) -> dict[str, Any]:
    """A CRD's openAPIV3Schema as JSON Schema that refuses unknown fields, as
    the API server does for a structural schema with strict field validation."""
    out = dict(schema)
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    if "properties" in out:
        out["properties"] = {k: structural(v) for k, v in out["properties"].items()}
        if "additionalProperties" not in out and not out.get(
            "x-kubernetes-preserve-unknown-fields"
        ):
            out["additionalProperties"] = False
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = structural(out["additionalProperties"])
    if isinstance(out.get("items"), dict):
        out["items"] = structural(out["items"])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in schema:
            out[key] = [structural(s) for s in out[key]]
    return out


def crd_validator(api_version: str, kind: str) -> Any:
    schema = json.loads(CRD_SCHEMAS[(api_version, kind)].read_text())
    return jsonschema.Draft4Validator(structural(schema))


def test_custom_resources_validate_against_their_crd_schemas(rendered: Rendered) -> None:
    for manifest in rendered.manifests:
        if not is_custom(manifest):
            continue
        validator = crd_validator(manifest["apiVersion"], manifest["kind"])
        errors = [
            f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(manifest)
        ]
        assert not errors, f"{manifest['kind']}/{manifest['metadata']['name']}: {errors}"


def test_the_validators_refuse_what_a_cluster_would(renders: dict[str, Rendered]) -> None:
    """The checks above can fail: a misspelled field is caught by both."""
    deployment = json.loads(json.dumps(renders["gpu"].get(*GATEWAY)))
    deployment["spec"]["replica"] = deployment["spec"].pop("replicas")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[0], strict=True)
    scaled = json.loads(json.dumps(renders["gpu"].get("ScaledObject", "vllm-engine")))
    scaled["spec"]["minReplicas"] = scaled["spec"].pop("minReplicaCount")
    assert list(crd_validator(scaled["apiVersion"], "ScaledObject").iter_errors(scaled))
    monitor = json.loads(json.dumps(renders["gpu"].get("PodMonitor", "vllm-gateway")))
    monitor["spec"]["podMetricsEndpoints"][0]["targetPortName"] = "admin"
    assert list(crd_validator(monitor["apiVersion"], "PodMonitor").iter_errors(monitor))


# --- the gateway's settings ------------------------------------------------------------


def test_the_settings_are_gateway_settings(
    rendered: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    fields = {f"GATEWAY_{name.upper()}" for name in Settings.model_fields}
    unknown = set(settings_env(rendered)) - fields
    assert not unknown, f"not settings of app.settings.Settings: {unknown}"
    settings = gateway_settings(rendered, monkeypatch)
    gateway = only_container(rendered, GATEWAY)
    assert gateway["envFrom"] == [
        {"configMapRef": {"name": rendered.config_map(SETTINGS)["metadata"]["name"]}}
    ]
    for entry in gateway.get("env", []):
        assert entry["name"] in fields, entry
    assert settings.host == "0.0.0.0"
    assert settings.port == named_port(gateway, "http")
    assert settings.admin_port == named_port(gateway, "admin")


def service_port(rendered: Rendered, name: str, port: int) -> tuple[Manifest, Manifest]:
    """A Service by name, and its entry for ``port``."""
    service = rendered.get("Service", name)
    (entry,) = [p for p in service["spec"]["ports"] if p["port"] == port]
    return service, entry


def selected_pods(rendered: Rendered, selector: dict[str, str]) -> list[Manifest]:
    """Pod templates whose labels carry every label of the selector."""
    assert selector, "an empty selector selects everything"
    return [
        pod
        for _, pod in rendered.pod_templates()
        if selector.items() <= pod["metadata"]["labels"].items()
    ]


def target_container_port(rendered: Rendered, service: Manifest, entry: Manifest) -> int:
    """The container port a Service port sends to, through its named targetPort."""
    (pod,) = selected_pods(rendered, service["spec"]["selector"])
    ports = [
        p["containerPort"]
        for c in pod["spec"]["containers"]
        for p in c.get("ports", [])
        if p.get("name") == entry["targetPort"] or p["containerPort"] == entry["targetPort"]
    ]
    assert len(ports) == 1, f"{service['metadata']['name']}: targetPort {entry['targetPort']}"
    return int(ports[0])


def test_the_gateways_find_every_engine_by_dns(
    rendered: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = gateway_settings(rendered, monkeypatch)
    assert settings.upstream_urls is not None
    match = re.fullmatch(r"dns\+http://([a-z0-9-]+):(\d+)", settings.upstream_urls)
    assert match, settings.upstream_urls
    service, entry = service_port(rendered, match.group(1), int(match.group(2)))
    # Headless: DNS answers with every ready engine pod's address, not one VIP.
    assert service["spec"]["clusterIP"] == "None"
    assert selected_pods(rendered, service["spec"]["selector"]) == [template(rendered, ENGINE)]
    engine_port = named_port(only_container(rendered, ENGINE), "http")
    assert target_container_port(rendered, service, entry) == engine_port
    # With a headless Service, clients connect to the pods themselves.
    assert int(match.group(2)) == engine_port


def test_the_gateways_share_their_state_through_redis(
    rendered: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = gateway_settings(rendered, monkeypatch)
    assert settings.redis_url is not None
    match = re.fullmatch(r"redis://([a-z0-9-]+):(\d+)/\d+", settings.redis_url)
    assert match, settings.redis_url
    service, entry = service_port(rendered, match.group(1), int(match.group(2)))
    assert selected_pods(rendered, service["spec"]["selector"]) == [template(rendered, REDIS)]
    assert target_container_port(rendered, service, entry) == 6379


def test_the_keys_come_from_a_secret_volume_without_subpath(
    rendered: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subPath mount never sees the Secret change; a volume does, and the
    gateway reloads the keys file when it changes."""
    keys_file = gateway_settings(rendered, monkeypatch).keys_file
    assert keys_file is not None
    pod = template(rendered, GATEWAY)["spec"]
    gateway = only_container(rendered, GATEWAY)
    (mount,) = [m for m in gateway["volumeMounts"] if keys_file.is_relative_to(m["mountPath"])]
    assert "subPath" not in mount
    assert "subPathExpr" not in mount
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "vllm-gateway-keys"
    # The key in the Secret is the file name the gateway reads.
    assert len(keys_file.relative_to(mount["mountPath"]).parts) == 1
    # No keys come with the manifests: the Secret is the operator's to create.
    assert not rendered.of_kind("Secret")


def test_the_engine_key_comes_from_one_optional_secret_for_both_sides(rendered: Rendered) -> None:
    """vLLM's key (``VLLM_API_KEY``, what ``--api-key`` sets) and the
    gateway's ``GATEWAY_UPSTREAM_API_KEY`` from the same Secret, which the
    operator creates: without it, both pods still start, keyless."""
    sources = {}
    for which, variable in ((GATEWAY, "GATEWAY_UPSTREAM_API_KEY"), (ENGINE, "VLLM_API_KEY")):
        env = {e["name"]: e for e in only_container(rendered, which).get("env", [])}
        ref = env[variable]["valueFrom"]["secretKeyRef"]
        assert ref["optional"] is True
        sources[which] = (ref["name"], ref["key"])
    assert sources[GATEWAY] == sources[ENGINE]
    assert "GATEWAY_UPSTREAM_API_KEY" not in settings_env(rendered)
    assert not rendered.of_kind("Secret")


def test_the_gateway_may_run_as_many_sequences_as_the_engine(
    rendered: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = gateway_settings(rendered, monkeypatch)
    assert settings.max_concurrency == engine_max_num_seqs(rendered)


def engine_max_num_seqs(rendered: Rendered) -> int:
    engine = only_container(rendered, ENGINE)
    for arg in engine.get("args", []):
        if str(arg).startswith("--max-num-seqs="):
            return int(str(arg).split("=", 1)[1])
    (value,) = [e["value"] for e in engine.get("env", []) if e["name"] == "ENGINE_MAX_NUM_SEQS"]
    return int(value)


# --- the drain ---------------------------------------------------------------------


def test_the_drain_fits_in_the_termination_grace_period(
    rendered: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On deletion the kubelet runs preStop, then sends SIGTERM; the
    gateway's shutdown must end before terminationGracePeriodSeconds, counted
    from the start, runs out and SIGKILL follows."""
    settings = gateway_settings(rendered, monkeypatch)
    pod = template(rendered, GATEWAY)["spec"]
    pre_stop = sleep_seconds(only_container(rendered, GATEWAY))
    assert pre_stop >= 1, "no time for endpoints to drop the pod before SIGTERM"
    assert settings.drain_grace_seconds < settings.shutdown_timeout
    assert pre_stop + settings.shutdown_timeout < pod["terminationGracePeriodSeconds"]


def test_an_engine_leaves_the_gateways_before_it_stops(
    rendered: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A terminating engine leaves the headless Service's DNS at once; every
    gateway re-resolves it (and checks health) before the engine is stopped."""
    settings = gateway_settings(rendered, monkeypatch)
    pod = template(rendered, ENGINE)["spec"]
    pre_stop = sleep_seconds(only_container(rendered, ENGINE))
    assert pre_stop > settings.upstream_dns_interval + settings.health_interval
    assert pre_stop < pod["terminationGracePeriodSeconds"]


# --- images, ports, probes, environment: the same as compose and the code -----------------


def gateway_services(config: Resolved) -> list[Manifest]:
    return [
        s
        for s in config["services"].values()
        if s.get("build", {}).get("dockerfile") == "Dockerfile"
    ]


def test_images_are_the_ones_compose_runs(rendered: Rendered, compose: Compose) -> None:
    config = compose_for(rendered, compose)
    expected = {
        GATEWAY: {s["image"] for s in gateway_services(config)},
        ENGINE: {config["services"]["vllm"]["image"]},
        REDIS: {config["services"]["redis"]["image"]},
    }
    for which, images in expected.items():
        image = only_container(rendered, which)["image"]
        assert {image} == images, f"{which[1]}: {image}, compose runs {images}"
    for _, pod in rendered.pod_templates():
        for spec in pod["spec"]["containers"]:
            tag = image_tag(spec["image"])
            assert tag, spec["image"]
            assert tag != "latest", spec["image"]


def dockerfile_values(path: Path, instruction: str) -> list[str]:
    return re.findall(rf"^{instruction}\s+(\S+)", path.read_text(), re.M)


def test_ports_are_the_ones_the_images_and_compose_use(
    rendered: Rendered, compose: Compose
) -> None:
    config = compose_for(rendered, compose)
    gateway = only_container(rendered, GATEWAY)
    http, admin = named_port(gateway, "http"), named_port(gateway, "admin")
    assert str(http) in dockerfile_values(GATEWAY_DOCKERFILE, "EXPOSE")
    for service in gateway_services(config):
        assert int(service["environment"]["GATEWAY_PORT"]) == http
        assert int(service["environment"]["GATEWAY_ADMIN_PORT"]) == admin
        upstream = str(service["environment"]["GATEWAY_UPSTREAM_URL"])
        assert upstream.endswith(f":{named_port(only_container(rendered, ENGINE), 'http')}")
    engine = only_container(rendered, ENGINE)
    engine_port = named_port(engine, "http")
    if rendered.name == "cpu":
        assert str(engine_port) in dockerfile_values(ENGINE_DOCKERFILE, "EXPOSE")
    else:
        assert f"--port={engine_port}" in engine["args"]
    redis_url = str(gateway_services(config)[0]["environment"]["GATEWAY_REDIS_URL"])
    assert f":{named_port(only_container(rendered, REDIS), 'redis')}/" in redis_url


def app_paths() -> set[str]:
    """Every path the gateway's app routes."""
    app = create_app(Settings())
    paths: set[str] = set()
    stack: list[Any] = list(app.router.routes)
    while stack:
        route = stack.pop()
        if getattr(route, "path", None):
            paths.add(route.path)
        included = getattr(route, "original_router", None)
        if included is not None:
            stack.extend(included.routes)
    return paths


def http_probes(spec: Manifest) -> Iterator[tuple[str, Manifest]]:
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        if kind in spec and "httpGet" in spec[kind]:
            yield kind, spec[kind]["httpGet"]


def test_probes_ask_what_the_servers_serve(rendered: Rendered, compose: Compose) -> None:
    paths = app_paths()
    gateway = only_container(rendered, GATEWAY)
    probes = dict(http_probes(gateway))
    assert probes["readinessProbe"]["path"] == "/health/ready"
    assert probes["livenessProbe"]["path"] == "/health/live"
    for probe in probes.values():
        assert probe["path"] in paths
        named_port(gateway, probe["port"])
    config = compose_for(rendered, compose)
    engine = only_container(rendered, ENGINE)
    engine_check = " ".join(config["services"]["vllm"]["healthcheck"]["test"])
    for _, probe in http_probes(engine):
        assert f":{named_port(engine, probe['port'])}{probe['path']}'" in engine_check
    redis = only_container(rendered, REDIS)
    redis_check = config["services"]["redis"]["healthcheck"]["test"]
    for kind in ("readinessProbe", "livenessProbe"):
        assert redis[kind]["exec"]["command"] == redis_check[1:]


def launcher_variables() -> set[str]:
    text = ENGINE_LAUNCHER.read_text() + ENGINE_DOCKERFILE.read_text()
    return set(re.findall(r"\b((?:ENGINE|VLLM)_[A-Z0-9_]+)", text))


def test_the_engine_is_configured_as_compose_configures_it(
    rendered: Rendered, compose: Compose
) -> None:
    engine = only_container(rendered, ENGINE)
    compose_engine = compose_for(rendered, compose)["services"]["vllm"]
    env = {e["name"] for e in engine.get("env", [])}
    if rendered.name == "cpu":
        # VLLM_API_KEY is read by vLLM itself, not by the launcher.
        launcher = launcher_variables() | {"VLLM_API_KEY"}
        assert env <= launcher, env - launcher
        assert env <= set(compose_engine["environment"])
        assert "args" not in engine
    else:
        # The official image's entrypoint (`vllm serve`) gets the same
        # arguments as in docker-compose.override.yml, but for where its
        # traces go: compose's own trace backend, which a cluster lacks.
        traces = "--otlp-traces-endpoint="
        assert engine["args"] == [a for a in compose_engine["command"] if not a.startswith(traces)]
        assert env <= set(compose_engine["environment"]) | {"HOME"}


# --- selectors and labels ----------------------------------------------------------------


def test_workloads_select_their_own_pods(rendered: Rendered) -> None:
    for manifest, pod in rendered.pod_templates():
        selector = manifest["spec"]["selector"]["matchLabels"]
        assert selector.items() <= pod["metadata"]["labels"].items(), manifest["metadata"]["name"]
        assert selected_pods(rendered, selector) == [pod], manifest["metadata"]["name"]


def test_services_budgets_and_monitors_select_one_workload(rendered: Rendered) -> None:
    selectors: list[tuple[str, dict[str, str]]] = []
    for service in rendered.of_kind("Service"):
        selectors.append((f"Service/{service['metadata']['name']}", service["spec"]["selector"]))
        for entry in service["spec"]["ports"]:
            target_container_port(rendered, service, entry)
    for kind in ("PodDisruptionBudget", "PodMonitor"):
        for manifest in rendered.of_kind(kind):
            name = f"{kind}/{manifest['metadata']['name']}"
            selectors.append((name, manifest["spec"]["selector"]["matchLabels"]))
    for name, selector in selectors:
        assert len(selected_pods(rendered, selector)) == 1, name
    for monitor in rendered.of_kind("PodMonitor"):
        (pod,) = selected_pods(rendered, monitor["spec"]["selector"]["matchLabels"])
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            (spec,) = pod["spec"]["containers"]
            named_port(spec, endpoint["port"])


def test_the_gateways_are_a_fleet(rendered: Rendered) -> None:
    gateways = workload(rendered, GATEWAY)
    replicas = gateways["spec"]["replicas"]
    assert replicas >= 2
    assert gateways["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    (budget,) = rendered.of_kind("PodDisruptionBudget")
    assert selected_pods(rendered, budget["spec"]["selector"]["matchLabels"]) == [
        template(rendered, GATEWAY)
    ]
    assert 0 < budget["spec"]["maxUnavailable"] < replicas
    # The engine count is the autoscaler's: an apply must not reset it.
    assert "replicas" not in workload(rendered, ENGINE)["spec"]


# --- security and resources ----------------------------------------------------------------


def dockerfile_uid(path: Path) -> int:
    (user,) = dockerfile_values(path, "USER")
    return int(user.split(":")[0])


def test_pods_run_as_non_root_with_least_privilege(rendered: Rendered) -> None:
    """What Pod Security's `restricted` level asks, except SYS_NICE for the
    CPU engine (NUMA binding under the runtime's default seccomp profile)."""
    for manifest, pod in rendered.pod_templates():
        name = manifest["metadata"]["name"]
        context = pod["spec"]["securityContext"]
        assert context["runAsNonRoot"] is True, name
        assert context["seccompProfile"]["type"] == "RuntimeDefault", name
        for spec in pod["spec"]["containers"]:
            own = spec["securityContext"]
            assert (own.get("runAsUser") or context.get("runAsUser", 0)) > 0, name
            assert own["allowPrivilegeEscalation"] is False, name
            assert own["capabilities"]["drop"] == ["ALL"], name
            added = set(own["capabilities"].get("add", []))
            allowed = {"SYS_NICE"} if (rendered.name, name) == ("cpu", ENGINE[1]) else set()
            assert added == allowed, f"{name}: {added}"
            assert not own.get("privileged"), name
    gateway_uid = template(rendered, GATEWAY)["spec"]["securityContext"]["runAsUser"]
    assert gateway_uid == dockerfile_uid(GATEWAY_DOCKERFILE)
    if rendered.name == "cpu":
        engine_uid = template(rendered, ENGINE)["spec"]["securityContext"]["runAsUser"]
        assert engine_uid == dockerfile_uid(ENGINE_DOCKERFILE)


def test_every_container_has_requests_and_limits(rendered: Rendered) -> None:
    for _, pod in rendered.pod_templates():
        for spec in pod["spec"]["containers"]:
            resources = spec["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]), spec["name"]
            assert "memory" in resources["limits"], spec["name"]
    engine = only_container(rendered, ENGINE)["resources"]
    if rendered.name.startswith("gpu"):
        assert engine["requests"]["nvidia.com/gpu"] == engine["limits"]["nvidia.com/gpu"] == "1"
    else:
        assert not any("gpu" in key for key in {*engine["requests"], *engine["limits"]})


def test_the_engine_has_shared_memory(rendered: Rendered) -> None:
    engine = only_container(rendered, ENGINE)
    (mount,) = [m for m in engine["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    volumes = template(rendered, ENGINE)["spec"]["volumes"]
    (volume,) = [v for v in volumes if v["name"] == mount["name"]]
    assert volume["emptyDir"]["medium"] == "Memory"


# --- monitoring ---------------------------------------------------------------------------


def monitored(renders: dict[str, Rendered]) -> list[Rendered]:
    return [r for r in renders.values() if r.of_kind("PrometheusRule")]


def test_the_dashboards_are_the_repositorys_json(renders: dict[str, Rendered]) -> None:
    files = sorted((ROOT / "dashboards").glob("*.json"))
    assert files
    for r in monitored(renders):
        maps = [
            m
            for m in r.of_kind("ConfigMap")
            if m["metadata"].get("labels", {}).get("grafana_dashboard") == "1"
        ]
        found = {key: value for m in maps for key, value in m["data"].items()}
        assert found == {path.name: path.read_text() for path in files}


def test_the_prometheusrule_carries_the_projects_rules(renders: dict[str, Rendered]) -> None:
    generated = K8S / "components" / "monitoring" / "prometheusrule.yaml"
    assert generated.read_text() == prometheusrule.render(), "run `make k8s-rules`"
    for r in monitored(renders):
        (rule,) = r.of_kind("PrometheusRule")
        assert rule["spec"]["groups"] == prometheusrule.rule_groups()


def test_the_monitors_scrape_the_metrics_ports_with_the_stacks_job_names(
    renders: dict[str, Rendered], monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = {
        job["job_name"]
        for job in yaml.safe_load(
            (ROOT / "deploy" / "prometheus" / "prometheus.compose.yml").read_text()
        )["scrape_configs"]
    }
    for r in monitored(renders):
        settings = gateway_settings(r, monkeypatch)
        ports = {
            "vllm-gateway": named_port(only_container(r, GATEWAY), "admin"),
            "vllm-engine": named_port(only_container(r, ENGINE), "http"),
        }
        assert settings.admin_port == ports["vllm-gateway"]
        found = set()
        for monitor in r.of_kind("PodMonitor"):
            (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
            (pod,) = selected_pods(r, monitor["spec"]["selector"]["matchLabels"])
            (spec,) = pod["spec"]["containers"]
            assert named_port(spec, endpoint["port"]) == ports[monitor["metadata"]["name"]]
            assert endpoint["path"] == "/metrics"
            (relabel,) = [x for x in endpoint["relabelings"] if x.get("targetLabel") == "job"]
            found.add(relabel["replacement"])
        assert found == jobs


# --- autoscaling -------------------------------------------------------------------------


def normalised(query: str) -> str:
    return " ".join(query.split())


def scaled_object(renders: dict[str, Rendered]) -> Manifest:
    return renders["gpu"].get("ScaledObject", "vllm-engine")


def keda_triggers(renders: dict[str, Rendered]) -> dict[str, Manifest]:
    return {t["name"]: t for t in scaled_object(renders)["spec"]["triggers"]}


def test_keda_scales_the_engines_on_the_gateways_metrics(renders: dict[str, Rendered]) -> None:
    scaled = scaled_object(renders)
    assert (
        scaled["spec"]["scaleTargetRef"]["name"]
        == workload(renders["gpu"], ENGINE)["metadata"]["name"]
    )
    families = {family.name for family in GatewayMetrics().registry.collect()}
    triggers = keda_triggers(renders)
    assert set(triggers) == {"kv-pressure", "demand"}
    for trigger in triggers.values():
        assert trigger["type"] == "prometheus"
        assert trigger["metricType"] == "AverageValue"
        query = trigger["metadata"]["query"]
        names = set(re.findall(r"\b(gateway_[a-z_]+)\b", query))
        assert names, query
        assert names <= families, names - families
        # Every selector names this deployment's namespace, and only it.
        selectors = re.findall(r"gateway_[a-z_]+(\{[^}]*\})?", query)
        assert all(s == f'{{namespace="{NAMESPACE}"}}' for s in selectors), selectors
    assert "gateway_queue_depth" in triggers["demand"]["metadata"]["query"]
    kv = triggers["kv-pressure"]["metadata"]["query"]
    assert {"gateway_fleet_kv_tokens_reserved", "gateway_kv_tokens_budget"} <= set(
        re.findall(r"gateway_[a-z_]+", kv)
    )
    # The thresholds the README explains: each engine kept under 80% of its
    # KV budget, and under 75% of its sequence cap.
    assert float(triggers["kv-pressure"]["metadata"]["threshold"]) == 0.8
    demand = float(triggers["demand"]["metadata"]["threshold"])
    assert demand == 0.75 * engine_max_num_seqs(renders["gpu"])


def test_scale_from_zero_starts_the_first_engine_on_held_requests(
    renders: dict[str, Rendered], monkeypatch: pytest.MonkeyPatch
) -> None:
    rendered = renders["gpu-zero"]
    spec = rendered.get("ScaledObject", "vllm-engine")["spec"]
    triggers = {t["name"]: t for t in spec["triggers"]}
    # The engines go to zero; the gateways, which hold the requests, never do.
    assert spec["minReplicaCount"] == 0
    assert workload(rendered, GATEWAY)["spec"]["replicas"] >= 2
    # The triggers of the fleet at one or more engines stay as they are.
    assert {n: t for n, t in triggers.items() if n != "held"} == keda_triggers(renders)
    held = triggers["held"]["metadata"]
    assert re.fullmatch(
        rf'sum\(gateway_requests_held\{{namespace="{NAMESPACE}"\}}\)', held["query"]
    )
    families = {family.name for family in GatewayMetrics().registry.collect()}
    assert "gateway_requests_held" in families
    assert float(held["activationThreshold"]) == 0  # one held request starts an engine
    # Never stopped while loading: the cool-down outlasts the startup probe.
    probe = only_container(rendered, ENGINE)["startupProbe"]
    loading = (
        probe.get("initialDelaySeconds", 0) + probe["periodSeconds"] * probe["failureThreshold"]
    )
    assert spec["cooldownPeriod"] >= loading
    # The gateways know the engine's model while none is up, at its length,
    # and hold requests for it longer than a start from the probe's period.
    settings = gateway_settings(rendered, monkeypatch)
    engine_args = dict(
        str(a).removeprefix("--").split("=", 1)
        for a in only_container(rendered, ENGINE)["args"]
        if str(a).startswith("--") and "=" in str(a)
    )
    assert parse_cold_models(settings.cold_models) == {
        engine_args["served-model-name"]: int(engine_args["max-model-len"])
    }
    assert settings.cold_start_timeout > probe["periodSeconds"]
    assert str(settings.upstream_urls).startswith("dns+")


def test_the_gateways_keep_batch_files_where_every_replica_finds_them(
    renders: dict[str, Rendered], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batches' state is in the Redis the replicas share; the files'
    bytes are on a ReadWriteMany claim every replica mounts at the batch
    directory (by default each pod's own emptyDir, on a read-only root)."""
    for name, claimed in (("gpu", False), ("gpu-batches", True)):
        rendered = renders[name]
        settings = gateway_settings(rendered, monkeypatch)
        gateway = only_container(rendered, GATEWAY)
        workdir = "/srv/gateway"  # the image's WORKDIR: the default directory is under it
        (mount,) = [m for m in gateway["volumeMounts"] if m["name"] == "batches"]
        assert (Path(workdir) / settings.batch_dir).is_relative_to(mount["mountPath"])
        (volume,) = [
            v for v in template(rendered, GATEWAY)["spec"]["volumes"] if v["name"] == "batches"
        ]
        assert settings.redis_url is not None
        if claimed:
            claim = rendered.get(
                "PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"]
            )
            assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
            assert "emptyDir" not in volume
        else:
            assert volume == {"name": "batches", "emptyDir": {}}


def test_the_autoscaling_queries_are_valid_promql(
    renders: dict[str, Rendered], tmp_path: Path
) -> None:
    zero = renders["gpu-zero"].get("ScaledObject", "vllm-engine")["spec"]["triggers"]
    rules = [
        {"record": f"check:{name.replace('-', '_')}", "expr": t["metadata"]["query"]}
        for name, t in {**keda_triggers(renders), **{t["name"]: t for t in zero}}.items()
    ]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "autoscaling", "rules": rules}]}))
    result = subprocess.run(
        [required_tool("promtool"), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def quantity(value: str) -> float:
    return float(value[:-1]) / 1000 if value.endswith("m") else float(value)


def test_the_hpa_alternative_scales_as_keda_does(renders: dict[str, Rendered]) -> None:
    scaled = scaled_object(renders)["spec"]
    (hpa,) = renders["gpu-hpa"].of_kind("HorizontalPodAutoscaler")
    spec = hpa["spec"]
    assert spec["scaleTargetRef"]["name"] == scaled["scaleTargetRef"]["name"]
    assert (spec["minReplicas"], spec["maxReplicas"]) == (
        scaled["minReplicaCount"],
        scaled["maxReplicaCount"],
    )
    assert spec["behavior"] == scaled["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    rules = yaml.safe_load(ADAPTER_VALUES.read_text())["rules"]["external"]
    adapter = {
        rule["name"]["as"]: rule["metricsQuery"].replace(
            "<<.LabelMatchers>>", f'namespace="{NAMESPACE}"'
        )
        for rule in rules
    }
    targets = {
        m["external"]["metric"]["name"]: quantity(m["external"]["target"]["averageValue"])
        for m in spec["metrics"]
    }
    keda = {
        normalised(t["metadata"]["query"]): float(t["metadata"]["threshold"])
        for t in keda_triggers(renders).values()
    }
    assert set(targets) == set(adapter)
    assert {normalised(adapter[name]): target for name, target in targets.items()} == keda
