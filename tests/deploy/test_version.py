"""The project's version has one home, app/__init__.py. pyproject.toml reads
it from there (tests/serve/test_cli.py checks the installed package), the Makefile
tags the image with it, and the only copies are the image tags of the files
that cannot read it: docker-compose.yml (test_compose.py checks it) and the
Kubernetes manifests (test_k8s.py: compose's image)."""

import re
import subprocess

from app import __version__
from tests.deploy.compose_files import ROOT, required_tool

# Where the version was once written by hand, and could be again.
DOCUMENTS = ("README.md", "Dockerfile", "pyproject.toml", "Makefile", ".env.example")


def test_the_makefile_tags_the_image_with_the_packages_version() -> None:
    done = subprocess.run(
        [required_tool("make"), "-s", "version"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == __version__


def test_no_other_file_writes_the_version() -> None:
    version = re.compile(rf"(?<![\w.]){re.escape(__version__)}(?![\w.])")
    files = [
        *(ROOT / name for name in DOCUMENTS),
        *(p for p in ROOT.glob("docker-compose*.yml") if p.name != "docker-compose.yml"),
        *(
            p
            for p in (ROOT / "deploy" / "k8s").rglob("*.yaml")
            if p.name != "gateway-deployment.yaml"
        ),
    ]
    naming = [str(p.relative_to(ROOT)) for p in files if version.search(p.read_text())]
    assert naming == [], f"the version written outside app/__init__.py: {naming}"
