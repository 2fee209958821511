#!/usr/bin/env bash
# Prepare this machine to build and run the project's containers with podman,
# without Docker and without a container registry:
#
#   1. podman, buildah, runc, mmdebstrap and docker-compose (Debian packages);
#   2. /etc/containers/containers.conf for a sandboxed root host;
#   3. local images for every base and service image the Dockerfiles and the
#      compose files name but that cannot be pulled here (python, Prometheus,
#      Redis), made from Debian's packages and named for what they are
#      (localhost/vllm-gateway-ci/prometheus:2.42.0-bookworm); the test
#      harness hands them to compose through PYTHON_IMAGE, PROMETHEUS_IMAGE
#      and REDIS_IMAGE.
#
# Idempotent: each step is skipped when its result is already there and up to
# date, so `make test-containers` can run it every time. Needs root (apt,
# /etc). Nothing is left running: the test harness starts podman's API service
# itself and stops it when done.
#
#   deploy/containers/setup.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.."

log() { printf '[containers setup] %s\n' "$*"; }

# --- 1. packages ---------------------------------------------------------------
# runc, not crun: crun 1.8 refuses hybrid cgroup hierarchies. The dnsname
# plugin gives compose networks their DNS (services reach each other by
# name); without it every lookup of a service name fails. catatonit is
# podman's init for services with `init: true`.
packages=(podman buildah runc mmdebstrap docker-compose
  containernetworking-plugins golang-github-containernetworking-plugin-dnsname
  iptables uidmap catatonit)
missing=()
for package in "${packages[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)"
  [ "$status" = "install ok installed" ] || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# --- 2. podman's configuration ---------------------------------------------------
"$here/write-containers-conf.sh" /etc/containers/containers.conf

# --- 3. local images --------------------------------------------------------------
# shellcheck source=names.sh
. "$here/names.sh"
drop_earlier_names
"$here/base-image.sh"
"$here/service-images.sh"
log "ready"
