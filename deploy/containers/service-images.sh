#!/usr/bin/env bash
# Build the service images docker-compose.yml runs but no registry here can
# give: Prometheus and Redis, from Debian's packages, on the local base (see
# base-image.sh). Each is named for what it is, with the version of the
# Debian package installed in it: Debian's Prometheus 2.42.0 is
# localhost/vllm-gateway-ci/prometheus:2.42.0-bookworm, not the
# prom/prometheus:v3.5.0 that compose runs by default; the test harness runs
# it through PROMETHEUS_IMAGE (and Redis through REDIS_IMAGE).
# Layer caching makes a rebuild with nothing changed take seconds.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
log() { printf '[containers setup] %s\n' "$*"; }
# shellcheck source=names.sh
. "$here/names.sh"

build() { # build CONTAINERFILE: prints the new image's ID
  local ids
  ids="$(mktemp)"
  podman build --quiet --format docker --iidfile "$ids" -f "$here/$1" "$here" >/dev/null
  cat "$ids"
  rm -f "$ids"
}

# The upstream part of a Debian package's version inside an image:
# 5:7.0.15-1~deb12u10 -> 7.0.15, 2.42.0+ds-5+deb12u1 -> 2.42.0
debian_version() { # debian_version IMAGE PACKAGE
  podman run --rm --network none --entrypoint dpkg-query "$1" -W -f '${Version}' "$2" | sed -E 's/^[0-9]+://; s/[-+~].*$//'
}

# service NAME CONTAINERFILE PACKAGE: build it and name it
# localhost/vllm-gateway-ci/NAME:<PACKAGE's version>-bookworm.
service() {
  local image version
  image="$(build "$2")"
  version="$(debian_version "$image" "$3")"
  name_only "$image" "$ci_repository/$1" "$version-bookworm"
  log "$1: Debian's $3 $version, named $ci_repository/$1:$version-bookworm"
}

service prometheus prometheus.Containerfile prometheus
service redis redis.Containerfile redis-server
