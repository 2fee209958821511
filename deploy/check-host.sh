#!/usr/bin/env sh
# What the local stack (`make up`, `make test`, the benchmarks) needs from the
# machine that `make` cannot install itself: Linux (vLLM's CPU build), Python
# 3.11+ with venv, Python.h and a C++ compiler (torch Inductor compiles the
# engine's kernels against them when it starts) and libnuma (vLLM's CPU
# kernels link against it). Prints nothing when all is there; else names what
# is missing with the Debian/Ubuntu packages that give it, and fails — at once,
# rather than after gigabytes of downloads or at the engine's first start.
#
#   deploy/check-host.sh [PYTHON]    (default python3; CXX names the compiler, as for Inductor)
set -u
python="${1:-python3}"
compiler="${CXX:-g++}"
missing=""
packages=""
need() { # need WHAT PACKAGE
  missing="$missing
  - $1"
  packages="$packages $2"
}

system="$(uname -s)"
if [ "$system" != Linux ]; then
  echo "The local stack runs vLLM's CPU build, which is for Linux only (this is $system)." >&2
  echo "Here, run the gateway alone in front of a vLLM elsewhere, or the containers (README)." >&2
  exit 1
fi

if ! command -v "$python" >/dev/null 2>&1; then
  need "Python 3.11 or later ($python)" "python3 python3-venv python3-dev"
elif ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "The local stack needs Python 3.11 or later; $python is $("$python" -V 2>&1)." >&2
  echo "Name another with PYTHON, e.g. make PYTHON=python3.11 up" >&2
  exit 1
else
  # Debian and Ubuntu ship ensurepip apart from Python: without it `python3 -m
  # venv` makes a venv with no pip.
  "$python" -c 'import ensurepip' 2>/dev/null || need "Python's venv (ensurepip) for $python" python3-venv
  "$python" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("include"), "Python.h")))' ||
    need "Python.h for $python (the engine compiles its kernels against it)" python3-dev
fi
command -v "$compiler" >/dev/null 2>&1 ||
  need "a C++ compiler, $compiler (the engine builds its kernels when it starts)" g++
# ldconfig lives in /sbin, which a user's PATH may lack.
PATH="$PATH:/sbin:/usr/sbin" ldconfig -p 2>/dev/null | grep -q 'libnuma\.so\.1 ' ||
  need "libnuma.so.1 (vLLM's CPU kernels link against it)" libnuma1

if [ -n "$missing" ]; then
  echo "The local stack needs what this machine lacks:$missing" >&2
  echo "On Debian or Ubuntu:  sudo apt-get install -y$packages" >&2
  exit 1
fi
