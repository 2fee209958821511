#!/usr/bin/env bash
# Build the service images docker-compose.yml runs but no registry here can
# give: Prometheus and Redis, from Debian's packages, on the local base (see
# base-image.sh). Each is tagged with the official names the compose files
# use, and Redis also as redis:<major>, redis:<major.minor> and
# redis:<version> of Debian's release, ready for compose files that add it.
# Layer caching makes a rebuild with nothing changed take seconds.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
log() { printf '[containers setup] %s\n' "$*"; }
# shellcheck source=names.sh
. "$here/names.sh"

build() { # build NAME CONTAINERFILE
  podman build --quiet --format docker -t "$1" -f "$here/$2" "$here" >/dev/null
}

# The upstream part of a Debian package's version inside an image:
# 5:7.0.15-1~deb12u10 -> 7.0.15
debian_version() { # debian_version IMAGE PACKAGE
  podman run --rm --entrypoint dpkg-query "$1" -W -f '${Version}' "$2" | sed -E 's/^[0-9]+://; s/[-+~].*$//'
}

tag_all() { # tag_all IMAGE NAME...
  local image="$1" name
  shift
  for name in "$@"; do podman tag "$image" "$(docker_name "$name")"; done
  log "$image tagged as: $*"
}

prometheus=localhost/vllm-gateway-prometheus:debian
build "$prometheus" prometheus.Containerfile
version="$(debian_version "$prometheus" prometheus)"
# shellcheck disable=SC2046 # one name per line
tag_all "$prometheus" "prom/prometheus:v$version" $(compose_images prom/prometheus "$root")

redis=localhost/vllm-gateway-redis:debian
build "$redis" redis.Containerfile
version="$(debian_version "$redis" redis-server)"
# shellcheck disable=SC2046 # one name per line
tag_all "$redis" "redis:${version%%.*}" "redis:${version%.*}" "redis:$version" \
  $(compose_images redis "$root")
