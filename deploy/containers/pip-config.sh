#!/usr/bin/env bash
# Print one value of the host's pip configuration (`pip config list`), e.g.
# `cert` (the CA bundle pip trusts) or `find-links` (local wheel folders).
# Environment settings win over files, as in pip itself; prints nothing when
# the key is not set.
#
#   pip-config.sh cert
set -euo pipefail
key="$1"
root="$(cd "$(dirname "$0")/../.." && pwd)"

pip_config() {
  if python3 -m pip --version >/dev/null 2>&1; then
    python3 -m pip config list
  elif [ -x "$root/.venv/bin/pip" ]; then
    "$root/.venv/bin/pip" config list
  fi
}

# Lines look like `global.cert='/path'` or `:env:.cert='/path'`.
pip_config | awk -v key="$key" '
  { split($0, kv, "="); name = kv[1]; sub(/^[^.]*\./, "", name) }
  name == key {
    value = substr($0, length(kv[1]) + 2); gsub(/^'\''|'\''$/, "", value)
    if ($0 ~ /^:env:/) env = value; else if (file == "") file = value
  }
  END { if (env != "") print env; else if (file != "") print file }
'
