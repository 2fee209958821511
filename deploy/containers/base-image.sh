#!/usr/bin/env bash
# Make the base image the project's Dockerfiles build FROM, locally: no
# registry is reachable, so python:3.11.14-slim-bookworm (their PYTHON_IMAGE
# default) cannot be had, and the test harness hands them this one instead.
#
# Debian bookworm (minbase) with Python 3.11 from Debian's packages, laid out
# like the official python:*-slim-bookworm image where the Dockerfiles rely on
# it (`python` on PATH, pip and venv, Python.h for the CPU engine's compiled
# kernels, useradd). It is named for what it is, with the Python version read
# from the image (localhost/vllm-gateway-ci/python:3.11.2-bookworm), and
# localhost/vllm-gateway-ci/base:bookworm for the service images built on it.
#
# Test-host only: it trusts the CA bundle the host's pip trusts (PyPI may be
# reached through a TLS-inspecting proxy). The Dockerfiles the project ships
# never carry it.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
log() { printf '[containers setup] %s\n' "$*"; }
# shellcheck source=names.sh
. "$here/names.sh"
name="$ci_repository/base:bookworm"

ca_bundle="$("$here/pip-config.sh" cert)"
: "${ca_bundle:=/etc/ssl/certs/ca-certificates.crt}"

# The host's Debian package sources (other vendors' sources need keys the new
# root does not have).
sources=()
for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  if [ -f "$file" ] && grep -qE '^[^#]*(deb|URIs:) .*/debian' "$file"; then sources+=("$file"); fi
done
if [ "${#sources[@]}" -eq 0 ]; then
  echo "no Debian package sources found in /etc/apt" >&2
  exit 1
fi

inputs="$(cat "$0" "$ca_bundle" "${sources[@]}" | sha256sum | cut -c1-16)"
current="$(podman image inspect --format '{{index .Labels "vllm-gateway.inputs"}}' "$name" 2>/dev/null || true)"
if [ "$current" != "$inputs" ]; then
  log "making $name with mmdebstrap"
  previous="$(podman image inspect --format '{{.Id}}' "$name" 2>/dev/null || true)"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  # The hooks run in a shell of their own: $1 is the new root.
  # shellcheck disable=SC2016
  CA_BUNDLE="$ca_bundle" mmdebstrap --quiet --variant=minbase \
    --include=python3,python3-venv,python3-pip,python3-dev,python-is-python3,ca-certificates,passwd \
    --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED' \
    --customize-hook='cp "$CA_BUNDLE" "$1/etc/ssl/certs/host-ca-bundle.pem"' \
    `# As in Debian's official images: packages never start services in a build.` \
    --customize-hook='printf "#!/bin/sh\nexit 101\n" >"$1/usr/sbin/policy-rc.d"' \
    --customize-hook='chmod 0755 "$1/usr/sbin/policy-rc.d"' \
    bookworm "$work/rootfs.tar" "${sources[@]}"
  bundle=/etc/ssl/certs/host-ca-bundle.pem
  podman import \
    --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    --change "ENV LANG=C.UTF-8" \
    --change "ENV PIP_CERT=$bundle" \
    --change "ENV SSL_CERT_FILE=$bundle" \
    --change "ENV REQUESTS_CA_BUNDLE=$bundle" \
    --change "LABEL vllm-gateway.inputs=$inputs" \
    --change 'CMD ["python3"]' \
    --quiet "$work/rootfs.tar" "$name" >/dev/null
fi
python="$(podman run --rm --network none "$name" python3 -c 'import platform; print(platform.python_version())')"
name_only "$name" "$ci_repository/python" "$python-bookworm"
# The image this one replaces, once it has no name left.
if [ -n "${previous:-}" ]; then remove_unnamed "$previous"; fi
log "base image $name, also named $ci_repository/python:$python-bookworm"
