# shellcheck shell=bash
# Image names as Docker (and so docker-compose, through podman's Docker API)
# reads them: a name without a registry is on docker.io, and a one-part name
# is in its `library/`. Tagging local images with the full name makes both
# `FROM python:…` in a build and `image: prom/prometheus:…` in compose find
# them without asking a registry.
docker_name() {
  local name="$1" first="${1%%/*}"
  if [ "$first" = "$name" ]; then
    name="docker.io/library/$name"
  elif [[ "$first" != *.* && "$first" != *:* && "$first" != localhost ]]; then
    name="docker.io/$name"
  fi
  printf '%s\n' "$name"
}

# Every image one of the compose files names whose repository matches $1,
# e.g. `compose_images 'prom/prometheus'`.
compose_images() {
  local root="$2"
  grep -hoE "^\s*image:\s*['\"]?([^'\"[:space:]]*/)?$1:[^'\"[:space:]]+" "$root"/docker-compose*.yml 2>/dev/null \
    | sed -E "s/^\s*image:\s*['\"]?//" | sort -u || true
}
