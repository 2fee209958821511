"""Traces in compose, checked offline: the trace backend service built from
the project's Dockerfile at the local stack's version, the gateways sending
to it over OTLP/HTTP and the engines over OTLP/gRPC in both variants, the one
variable that turns every trace off, and Grafana's link from an exemplar to
its trace. The container step runs the CPU variant and follows one request's
trace into the backend (tests/containers/test_traces.py)."""

import os
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import cast
from urllib.parse import urlsplit

import pytest

from app.observe.tracing import tracing_wanted
from app.request.record import RequestRecord
from deploy import compose_settings
from tests.deploy.compose_files import (
    BASE,
    CPU_FILE,
    ENGINE,
    ROOT,
    VARIANTS,
    WITH_TWO_ENGINES,
    Compose,
    Service,
    gateway_services,
    image_tag,
    published_ports,
    required_tool,
)
from tests.support.grafana import exemplar_link
from tests.support.locks import lock_pins

TRACES = "traces"
TRACES_DOCKERFILE = ROOT / "deploy" / "traces" / "Dockerfile"
TRACES_LAUNCHER = "deploy/traces/run.sh"
ENGINE_LAUNCHER = ROOT / "deploy" / "engine" / "run-cpu.sh"
ENGINE_FLAG = "--otlp-traces-endpoint"


@pytest.fixture(scope="module")
def compose(tmp_path_factory: pytest.TempPathFactory) -> Compose:
    env_file = tmp_path_factory.mktemp("compose") / "empty.env"
    env_file.write_text("")
    return Compose(required_tool("docker-compose"), env_file)


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def variant(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def dockerfile_env(path: Path) -> dict[str, str]:
    """The ENV values a Dockerfile sets (NAME=value, continuation lines joined)."""
    text = re.sub(r"\\\n", " ", path.read_text())
    found: dict[str, str] = {}
    for line in re.findall(r"^ENV\s+(.+)$", text, re.M):
        found |= dict(re.findall(r"(\w+)=(\S+)", line))
    return found


def the_backends_ports() -> tuple[int, int]:
    """The backend image's OTLP/HTTP (and UI) port and its OTLP/gRPC port."""
    env = dockerfile_env(TRACES_DOCKERFILE)
    return int(env["TRACES_PORT"]), int(env["TRACES_GRPC_PORT"])


def engine_argv(engine: Service, variant: str, tmp_path: Path) -> list[str]:
    """The engine's command line: the GPU image's `vllm serve` arguments, or
    what the CPU image's launcher (run-cpu.sh) runs with the service's
    environment (a stand-in for the engine's Python prints it)."""
    if variant == "gpu":
        return [str(arg) for arg in engine["command"]]
    python = tmp_path / "python"
    python.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    python.chmod(0o755)
    env = {key: str(value) for key, value in engine["environment"].items()}
    env |= {"PATH": "/usr/bin:/bin", "ENGINE_PYTHON": str(python)}
    result = subprocess.run(
        ["sh", str(ENGINE_LAUNCHER)], env=env, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def flag_value(argv: list[str], flag: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == flag:
            return argv[i + 1]
        if arg.startswith(f"{flag}="):
            return arg.split("=", 1)[1]
    return None


# --- the backend ---------------------------------------------------------------------


def test_the_backend_is_built_from_its_dockerfile_at_the_local_stacks_version(
    compose: Compose, variant: str
) -> None:
    service = compose.resolved(variant)["services"][TRACES]
    build = service["build"]
    assert Path(build["context"]) / build["dockerfile"] == TRACES_DOCKERFILE
    # The Phoenix `make up` and the tests run: requirements/traces.lock,
    # installed whole into the image, which is tagged with its version.
    version = lock_pins("requirements/traces.lock")["arize-phoenix"]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(rf"^TRACE_BACKEND_VERSION\s*:?=\s*{re.escape(version)}$", makefile, re.M)
    assert image_tag(service["image"]) == version
    dockerfile = TRACES_DOCKERFILE.read_text()
    assert re.search(r"^RUN .*pip install .*-r \S*traces\.lock", dockerfile, re.M)
    # Started by the launcher `make up` and the tests start it with.
    assert re.search(rf"^COPY {TRACES_LAUNCHER} ", dockerfile, re.M)
    (entrypoint,) = re.findall(r"^ENTRYPOINT (.+)$", dockerfile, re.M)
    assert "run.sh" in entrypoint


def test_the_backend_runs_as_its_own_user_with_its_spans_in_a_volume(
    compose: Compose, variant: str
) -> None:
    service = compose.resolved(variant)["services"][TRACES]
    dockerfile = re.sub(r"\\\n", " ", TRACES_DOCKERFILE.read_text())
    (user,) = re.findall(r"^USER\s+(\S+)", dockerfile, re.M)
    assert user.split(":")[0] not in ("0", "root"), user
    assert re.search(r"^HEALTHCHECK .*/healthz", dockerfile, re.M)
    # Where run.sh keeps the spans is a named volume: they outlive the container.
    spans_dir = dockerfile_env(TRACES_DOCKERFILE)["TRACES_DIR"]
    (volume,) = service["volumes"]
    source, target = (
        (volume["source"], volume["target"])
        if isinstance(volume, dict)
        else str(volume).split(":")[:2]
    )
    assert target == spans_dir
    assert source in compose.resolved(variant)["volumes"]


def test_the_backends_ui_is_published_and_its_receivers_are_not(
    compose: Compose, variant: str
) -> None:
    service = compose.resolved(variant)["services"][TRACES]
    http, _ = the_backends_ports()
    # OTLP/gRPC stays inside the network; OTLP/HTTP shares the UI's port.
    assert published_ports(service) == {http}
    assert any(f"127.0.0.1:{http}/healthz" in part for part in service["healthcheck"]["test"])


# --- who sends to it ---------------------------------------------------------------------


def test_the_gateways_send_every_requests_spans_to_the_backend_over_otlp_http(
    compose: Compose, variant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    services = compose.resolved(variant)["services"]
    http, _ = the_backends_ports()
    for name in gateway_services({"services": services}):
        gateway = services[name]
        env = {key: str(value) for key, value in gateway["environment"].items()}
        assert tracing_wanted(env), name
        # Where the SDK's exporter sends them, with this environment.
        with monkeypatch.context() as patch:
            for key in [k for k in os.environ if k.startswith("OTEL_")]:
                patch.delenv(key)
            for key in [k for k in env if k.startswith("OTEL_")]:
                patch.setenv(key, env[key])
            endpoint = urlsplit(OTLPSpanExporter()._endpoint)
        assert (endpoint.hostname, endpoint.port, endpoint.path) == (TRACES, http, "/v1/traces")
        assert env["OTEL_TRACES_SAMPLER"] == "parentbased_always_on"
        # The backend is up before their first span and stops after their last.
        assert gateway["depends_on"][TRACES]["condition"] == "service_healthy"


def test_the_engines_send_their_spans_to_the_backend_over_otlp_grpc(
    compose: Compose, variant: str, tmp_path: Path
) -> None:
    engine = compose.resolved(variant)["services"][ENGINE]
    _, grpc = the_backends_ports()
    assert flag_value(engine_argv(engine, variant, tmp_path), ENGINE_FLAG) == (
        f"http://{TRACES}:{grpc}"
    )
    # vLLM's exporter speaks gRPC unless this says otherwise.
    assert "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" not in engine["environment"]
    assert engine["environment"]["OTEL_SERVICE_NAME"] == "vllm"
    assert TRACES in engine["depends_on"]


def test_the_second_gpu_engine_traces_as_the_first(compose: Compose, tmp_path: Path) -> None:
    services = compose.resolved_files(WITH_TWO_ENGINES)["services"]
    _, grpc = the_backends_ports()
    for name in (ENGINE, "vllm-2"):
        argv = engine_argv(services[name], "gpu", tmp_path)
        assert flag_value(argv, ENGINE_FLAG) == f"http://{TRACES}:{grpc}", name
        assert services[name]["environment"]["OTEL_SDK_DISABLED"] == "false", name
        assert TRACES in services[name]["depends_on"], name


# --- what .env changes -----------------------------------------------------------------


def test_env_points_the_gateways_and_the_engines_at_another_collector(
    compose: Compose, variant: str, tmp_path: Path
) -> None:
    given = {name: f"{name.lower()}-given" for name in compose_settings.TRACE_VARIABLES}
    given["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = "http://collector.example:4318/v1/traces"
    given["ENGINE_OTLP_TRACES_ENDPOINT"] = "http://collector.example:4317"
    services = compose.resolved_files(VARIANTS[variant], env=given)["services"]
    for name in gateway_services({"services": services}):
        env = services[name]["environment"]
        assert {key: env[key] for key in compose_settings.TRACE_VARIABLES} == {
            key: given[key] for key in compose_settings.TRACE_VARIABLES
        }, name
    argv = engine_argv(services[ENGINE], variant, tmp_path)
    assert flag_value(argv, ENGINE_FLAG) == given["ENGINE_OTLP_TRACES_ENDPOINT"]
    # The engines sample as the gateways do.
    for name in ("OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"):
        assert services[ENGINE]["environment"][name] == given[name], name


def test_one_variable_turns_every_trace_off(compose: Compose, variant: str) -> None:
    services = compose.resolved_files(VARIANTS[variant], env={"OTEL_SDK_DISABLED": "true"})[
        "services"
    ]
    for name in gateway_services({"services": services}):
        env = {key: str(value) for key, value in services[name]["environment"].items()}
        assert not tracing_wanted(env), name
    # vLLM's tracer provider is the SDK's, which reads the same switch
    # (test_vllm_reads_the_switch_and_the_sampler_compose_passes_it).
    assert services[ENGINE]["environment"]["OTEL_SDK_DISABLED"] == "true"


# The tracer vLLM's --otlp-traces-endpoint starts under each value of the
# switch (the provider reads the variables when made), and its sampler; one
# interpreter, vLLM imported once.
VLLM_TRACERS = """
import os, sys
from vllm.tracing import init_tracer
for disabled in sys.argv[1:]:
    os.environ["OTEL_SDK_DISABLED"] = disabled
    tracer = init_tracer("vllm.llm_engine", "http://127.0.0.1:9")
    sampler = getattr(tracer, "sampler", None)
    print(disabled, type(tracer).__name__, sampler.get_description() if sampler else "-")
"""


def test_vllm_reads_the_switch_and_the_sampler_compose_passes_it() -> None:
    """What --otlp-traces-endpoint starts in vLLM, with the variables compose
    passes the engines: the SDK's no-op tracer when the switch says true,
    else a tracer with the sampler asked for."""
    python = ROOT / ".venv-engine" / "bin" / "python"
    assert python.exists(), "the engine's environment: make setup"
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env |= {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"}
    result = subprocess.run(
        [str(python), "-c", VLLM_TRACERS, "true", "false"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    tracers = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines()}
    assert tracers["true"] == ["NoOpTracer", "-"]
    kind, sampler = tracers["false"]
    assert kind == "Tracer"
    assert sampler.startswith("ParentBased{root:TraceIdRatioBased{0.1}"), sampler


def test_the_generated_environment_names_every_trace_variable_the_docs_list() -> None:
    """The variables compose passes the gateways are the ones .env.example
    and docs/traces.md name for compose."""
    env_example = (ROOT / ".env.example").read_text()
    docs = (ROOT / "docs" / "traces.md").read_text()
    for name, (default, _) in compose_settings.TRACE_VARIABLES.items():
        assert f"# {name}={default}\n" in env_example, name
        assert f"`{name}`" in docs, name
    assert compose_settings.TRACES_ENDPOINT in docs


# --- Grafana ----------------------------------------------------------------------------


def test_an_exemplar_links_to_its_trace_in_the_backends_ui(compose: Compose) -> None:
    services = compose.resolved_files(["-f", BASE, "-f", CPU_FILE])["services"]
    # The label the gateway's latency histograms give a traced request.
    exemplar = RequestRecord.exemplar(cast(RequestRecord, SimpleNamespace(trace_id="0")))
    assert exemplar
    (label,) = exemplar
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    environ = {key: str(value) for key, value in services["grafana"]["environment"].items()}
    link = urlsplit(exemplar_link(label, trace_id, environ))
    # On this host, where the backend's UI is published (the defaults).
    http, _ = the_backends_ports()
    (ports,) = services[TRACES]["ports"]
    published = ports["published"] if isinstance(ports, dict) else str(ports).split(":")[-2]
    assert (link.scheme, link.hostname, link.port) == ("http", "127.0.0.1", int(published))
    assert published_ports(services[TRACES]) == {http}
    # The UI's address for a trace by its id (Phoenix finds its project);
    # the container step opens it on the running backend.
    assert link.path == f"/redirects/traces/{trace_id}"
