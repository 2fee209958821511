"""Build the images of the CPU compose stack from the project's Dockerfiles:
every service with a ``build:`` section, named as compose names it.

    python -m tests.containers.images

Built with podman in Docker's image format: the OCI format has no place for
HEALTHCHECK, and podman drops it without a word. The build arguments are the
ones compose resolves, so the Dockerfiles start FROM the local Python image
(``PYTHON_IMAGE``, see stand_ins.py), not the upstream default that no
registry here serves. A Dockerfile that takes a folder of wheels (``ARG
WHEELS``: the CPU engine, whose torch ``+cpu`` wheel lives on PyTorch's own
index) gets the host's local wheel folder, the one pip is configured to look
in (``pip config list``), as a read-only build volume, and its PyTorch index
(``TORCH_INDEX_URL``) is switched off.
"""

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.containers.compose import ROOT, ComposeProject

WHEELS_IN_BUILD = "/wheels"


def pip_find_links() -> list[Path]:
    """Local folders in the host's pip configuration (find-links)."""
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    ).stdout
    folders: list[Path] = []
    for line in listing.splitlines():
        key, _, value = line.partition("=")
        if key.rsplit(".", 1)[-1] != "find-links":
            continue
        for location in value.strip("'\"").split():
            path = Path(location.removeprefix("file://"))
            if path.is_dir() and path not in folders:
                folders.append(path)
    return folders


def wheel_folder() -> Path | None:
    """The host's wheel folder that holds torch, else the first one."""
    folders = pip_find_links()
    with_torch = [folder for folder in folders if any(folder.glob("torch-*.whl"))]
    found = with_torch or folders
    return found[0] if found else None


def declared_args(dockerfile: Path) -> set[str]:
    return set(re.findall(r"^\s*ARG\s+([A-Za-z_]\w*)", dockerfile.read_text(), re.M | re.I))


def build_command(image: str, context: Path, dockerfile: Path, args: dict[str, str]) -> list[str]:
    argv = ["podman", "build", "--format", "docker", "-t", image, "-f", str(dockerfile)]
    build_args = dict(args)
    declared = declared_args(dockerfile)
    wheels = wheel_folder() if "WHEELS" in declared else None
    if wheels is not None:
        argv += ["-v", f"{wheels}:{WHEELS_IN_BUILD}:ro"]
        build_args["WHEELS"] = WHEELS_IN_BUILD
        if "TORCH_INDEX_URL" in declared:
            build_args["TORCH_INDEX_URL"] = ""
    for key, value in build_args.items():
        argv += ["--build-arg", f"{key}={value}"]
    return [*argv, str(context)]


def build_all() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        env_file = Path(tmp) / "empty.env"
        env_file.write_text("")
        project = ComposeProject("images", env_file)
    seconds: dict[str, float] = {}
    for name in project.runnable():
        service = project.services[name]
        build = service.get("build")
        # Replicas name the same build: one is enough.
        if not build or service["image"] in seconds:
            continue
        context = Path(build["context"])
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        argv = build_command(service["image"], context, dockerfile, build.get("args") or {})
        print(f"building {service['image']} ({dockerfile.relative_to(ROOT)})", flush=True)
        started = time.monotonic()
        with tempfile.NamedTemporaryFile("w+", suffix=".log") as log:
            result = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, check=False)
            if result.returncode != 0:
                log.seek(0)
                tail = "".join(log.readlines()[-60:])
                raise SystemExit(f"{' '.join(argv)} failed:\n{tail}")
        seconds[service["image"]] = time.monotonic() - started
        print(f"built {service['image']} in {seconds[service['image']]:.1f} s", flush=True)
    return seconds


if __name__ == "__main__":
    build_all()
