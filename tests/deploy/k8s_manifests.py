"""The Kubernetes manifests of deploy/k8s/, rendered as a user renders them
(`kubectl kustomize`), for the offline checks (test_k8s.py) and for the
container step, which runs the images under the manifests' security context.
"""

import os
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.compose_files import ROOT, required_tool

K8S = ROOT / "deploy" / "k8s"
OVERLAYS = ("gpu", "cpu")
# The monitoring component reads dashboards/ and deploy/prometheus/rules/,
# outside its own folder.
KUSTOMIZE_FLAGS = ("--load-restrictor", "LoadRestrictionsNone")

Manifest = dict[str, Any]


@dataclass(frozen=True)
class Rendered:
    name: str
    manifests: list[Manifest]

    def of_kind(self, kind: str) -> list[Manifest]:
        return [m for m in self.manifests if m["kind"] == kind]

    def get(self, kind: str, name: str) -> Manifest:
        found = [m for m in self.of_kind(kind) if m["metadata"]["name"] == name]
        assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
        return found[0]

    def config_map(self, prefix: str) -> Manifest:
        """A generated ConfigMap, by its name before the hash suffix."""
        found = [
            m
            for m in self.of_kind("ConfigMap")
            if m["metadata"]["name"] == prefix or m["metadata"]["name"].startswith(prefix + "-")
        ]
        assert len(found) == 1, f"ConfigMap {prefix}: {len(found)} found"
        return found[0]

    def pod_templates(self) -> Iterator[tuple[Manifest, Manifest]]:
        """(workload, its pod template) for every workload."""
        for manifest in self.manifests:
            if manifest["kind"] in ("Deployment", "StatefulSet", "DaemonSet"):
                yield manifest, manifest["spec"]["template"]


def kustomize(path: Path) -> list[Manifest]:
    result = subprocess.run(
        [required_tool("kubectl"), "kustomize", *KUSTOMIZE_FLAGS, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def render_overlay(name: str) -> Rendered:
    return Rendered(name, kustomize(K8S / "overlays" / name))


def render_composed(name: str, components: list[str], patches: list[str]) -> Rendered:
    """The base with other components than an overlay picks, as a user who
    edits an overlay's `components:` would render it (e.g. the HPA instead of
    KEDA), in a throwaway kustomization outside the repository."""
    with tempfile.TemporaryDirectory() as tmp:
        up = os.path.relpath(K8S, tmp)
        lines = [
            "apiVersion: kustomize.config.k8s.io/v1beta1",
            "kind: Kustomization",
            "namespace: vllm-gateway",
            f"resources: [{up}/base]",
            "components: [" + ", ".join(f"{up}/{c}" for c in components) + "]",
            "patches: [" + ", ".join(f"{{path: {up}/{p}}}" for p in patches) + "]",
        ]
        (Path(tmp) / "kustomization.yaml").write_text("\n".join(lines) + "\n")
        return Rendered(name, kustomize(Path(tmp)))


def container(template: Manifest, name: str) -> Manifest:
    found: list[Manifest] = [c for c in template["spec"]["containers"] if c["name"] == name]
    assert len(found) == 1, f"container {name}: {len(found)} found"
    return found[0]
