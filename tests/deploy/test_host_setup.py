"""What `make up` needs of a fresh machine: the system packages are checked
before anything is installed, and named with the packages that give them
(deploy/check-host.sh); the engine's environment takes PyTorch's CPU build
from a local wheel folder when pip's configuration has one that holds it,
else from PyTorch's own index (deploy/engine/torch-index.sh)."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.deploy.compose_files import ROOT, required_tool

CHECK_HOST = ROOT / "deploy" / "check-host.sh"
TORCH_INDEX = ROOT / "deploy" / "engine" / "torch-index.sh"
PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH = "torch==2.13.0+cpu"


def check_host(python: str = sys.executable, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CHECK_HOST), python],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def fake_program(folder: Path, name: str, script: str) -> Path:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    return path


def test_a_machine_with_everything_passes_in_silence() -> None:
    done = check_host()
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_a_missing_compiler_is_named_with_its_package() -> None:
    done = check_host(CXX="no-such-compiler")
    assert done.returncode == 1
    assert "a C++ compiler, no-such-compiler" in done.stderr
    assert done.stderr.splitlines()[-1] == "On Debian or Ubuntu:  sudo apt-get install -y g++"


def test_an_older_python_is_refused_with_its_version(tmp_path: Path) -> None:
    """This Python, telling the check it is 3.10 (all else is there)."""
    python = fake_program(
        tmp_path,
        "python3",
        'if [ "$1" = -V ]; then echo "Python 3.10.12"; exit; fi\n'
        f"exec {sys.executable} -c 'import sys; sys.version_info = (3, 10, 12); exec(sys.argv[1])'"
        ' "$2"',
    )
    done = check_host(str(python))
    assert done.returncode == 1
    assert f"needs Python 3.11 or later; {python} is Python 3.10.12" in done.stderr


def test_a_missing_python_is_named_with_its_packages() -> None:
    done = check_host("no-such-python")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].endswith("install -y python3 python3-venv python3-dev")


def test_elsewhere_than_linux_it_says_the_stack_runs_on_linux_only(tmp_path: Path) -> None:
    fake_program(tmp_path, "uname", "echo Darwin")
    done = check_host(PATH=f"{tmp_path}:{os.environ['PATH']}")
    assert done.returncode == 1
    assert "for Linux only (this is Darwin)" in done.stderr


def test_make_checks_the_host_before_it_installs_anything(tmp_path: Path) -> None:
    """On a fresh clone: nothing set up yet."""
    fresh = [f"{name}={tmp_path / name}" for name in ("VENV", "ENGINE_VENV", "MODEL_DIR")]
    # Not as a make inside make (the suite runs under `make test`): no
    # "Entering directory" lines, none of the outer make's flags.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    done = subprocess.run(
        [required_tool("make"), "--no-print-directory", "-n", "setup", *fresh],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.splitlines()[0] == "deploy/check-host.sh python3"


def torch_index(pip: str, wheels: Path | None = None, choice: str | None = None) -> str:
    """What torch-index.sh prints, with pip configured by nothing but
    ``wheels`` (its find-links)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    if wheels is not None:
        env["PIP_FIND_LINKS"] = str(wheels)
    argv = [str(TORCH_INDEX), pip, TORCH, *([choice] if choice is not None else [])]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


def a_torch_wheel(folder: Path) -> Path:
    """A wheel that pip takes for PyTorch's CPU build (its name and metadata)."""
    folder.mkdir()
    info = "torch-2.13.0+cpu.dist-info"
    with zipfile.ZipFile(folder / "torch-2.13.0+cpu-py3-none-any.whl", "w") as wheel:
        wheel.writestr(
            f"{info}/METADATA", "Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0+cpu\n"
        )
        wheel.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        wheel.writestr(f"{info}/RECORD", "")
    return folder


PIP = str(Path(sys.executable).with_name("pip"))


def test_a_torch_wheel_in_pips_wheel_folder_needs_no_index(tmp_path: Path) -> None:
    assert torch_index(PIP, a_torch_wheel(tmp_path / "wheels")) == "\n"


def test_without_one_torch_comes_from_pytorchs_cpu_index(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    assert torch_index(PIP, tmp_path / "wheels") == f"{PYTORCH_CPU_INDEX}\n"
    assert torch_index(PIP) == f"{PYTORCH_CPU_INDEX}\n"


def test_an_index_named_or_none_is_taken_as_it_is() -> None:
    # pip is not asked: `false` would make it the PyTorch index.
    assert (
        torch_index("false", choice="http://mirror.example/torch")
        == "http://mirror.example/torch\n"
    )
    assert torch_index("false", choice="") == "\n"
