"""The images as the Kubernetes manifests (deploy/k8s/) run them, where no
cluster is at hand: the gateway image under the manifests' security context
(their user, a read-only root filesystem, no capabilities, no privilege
escalation, the keys Secret as a mounted folder) starts, answers on both its
ports and drains on SIGTERM; every preStop command exists in its image."""

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.containers import podman
from tests.containers.metrics import FETCH
from tests.deploy.k8s_manifests import Manifest, Rendered, container, render_overlay
from tests.support.keys import write_keys_file

pytestmark = pytest.mark.timeout(600)

UP_WITHIN = 60.0


@pytest.fixture(scope="module")
def rendered() -> Rendered:
    # The CPU overlay runs the images built here; the GPU one only swaps the engine.
    return render_overlay("cpu")


def security(pod: Manifest, spec: Manifest) -> dict[str, object]:
    """The container's effective security context (its own over the pod's)."""
    merged: dict[str, object] = {**pod["securityContext"], **spec["securityContext"]}
    return merged


@pytest.fixture
def gateway(rendered: Rendered, tmp_path: Path) -> Iterator[str]:
    template = rendered.get("Deployment", "vllm-gateway")["spec"]["template"]
    spec = container(template, "gateway")
    context = security(template["spec"], spec)
    env = dict(rendered.config_map("vllm-gateway-settings")["data"])
    # No Redis here, and no engines: the gateway's own listeners are checked.
    env.pop("GATEWAY_REDIS_URL")
    # The Secret volume: a folder holding the keys file (no keys in it).
    (mount,) = [m for m in spec["volumeMounts"] if m["name"] == "keys"]
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o755)
    write_keys_file(keys / Path(env["GATEWAY_KEYS_FILE"]).name, []).chmod(0o644)
    # Unique per test session: two runs on one machine share podman's names.
    name = f"vgw-k8s-context-{os.getpid()}-{tmp_path.name.lower()}"
    argv = ["run", "--detach", "--name", name]
    argv += ["--user", f"{context['runAsUser']}:{context['runAsGroup']}"]
    if context.get("readOnlyRootFilesystem"):
        argv.append("--read-only")
    assert spec["securityContext"]["capabilities"]["drop"] == ["ALL"]
    argv += ["--cap-drop", "ALL"]
    if context.get("allowPrivilegeEscalation") is False:
        argv += ["--security-opt", "no-new-privileges"]
    argv += ["--volume", f"{keys}:{mount['mountPath']}:ro"]
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    podman.podman(*argv, spec["image"])
    try:
        yield name
    finally:
        podman.podman("rm", "--force", "--time", "0", name, check=False)


def fetch(name: str, port: int, path: str) -> str | None:
    """A GET from inside the container, None while it does not answer 200."""
    result = subprocess.run(
        ["podman", "exec", name, "python", "-c", FETCH, f"http://127.0.0.1:{port}{path}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return result.stdout if result.returncode == 0 else None


def named_port(spec: Manifest, name: str) -> int:
    (port,) = [p["containerPort"] for p in spec["ports"] if p["name"] == name]
    return int(port)


def test_the_gateway_runs_under_the_manifests_security_context(
    rendered: Rendered, gateway: str
) -> None:
    template = rendered.get("Deployment", "vllm-gateway")["spec"]["template"]
    spec = container(template, "gateway")
    http, admin = named_port(spec, "http"), named_port(spec, "admin")
    deadline = time.monotonic() + UP_WITHIN
    while fetch(gateway, http, "/health/live") is None and time.monotonic() < deadline:
        time.sleep(1)
    assert fetch(gateway, http, "/health/live") is not None, podman.podman("logs", gateway)
    metrics = fetch(gateway, admin, "/metrics")
    assert metrics is not None
    assert "gateway_requests_total" in metrics
    status = podman.exec_in(gateway, "cat", "/proc/1/status")
    uid = next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:"))
    assert int(uid) == template["spec"]["securityContext"]["runAsUser"]
    # The preStop hook runs in the container, as its user.
    command = spec["lifecycle"]["preStop"]["exec"]["command"]
    podman.exec_in(gateway, command[0], "0")
    # SIGTERM: the drain (nothing in flight) and a clean exit, read-only root
    # filesystem and all, inside the pod's grace period.
    grace = int(template["spec"]["terminationGracePeriodSeconds"])
    podman.podman("stop", "--time", str(grace), gateway, timeout=grace + 30)
    state = podman.inspect(gateway)["State"]
    assert state["ExitCode"] == 0, podman.podman("logs", gateway)


def test_every_prestop_command_exists_in_its_image(rendered: Rendered) -> None:
    for _, template in rendered.pod_templates():
        for spec in template["spec"]["containers"]:
            hook = spec.get("lifecycle", {}).get("preStop", {}).get("exec")
            if hook is None:
                continue
            user = security(template["spec"], spec).get("runAsUser", 0)
            podman.podman(
                "run",
                "--rm",
                "--user",
                str(user),
                "--entrypoint",
                hook["command"][0],
                spec["image"],
                "0",
            )
