# shellcheck shell=bash
# Names of the local images the container step makes in place of images no
# registry here can give. Each is named for what it is, under
# localhost/vllm-gateway-ci/: Debian's Prometheus 2.42.0 is
# prometheus:2.42.0-bookworm, never prom/prometheus:<an upstream tag>. The
# compose files name those images by variable with the upstream default
# (PROMETHEUS_IMAGE, REDIS_IMAGE, and PYTHON_IMAGE for the Dockerfiles' base),
# and the test harness sets <NAME>_IMAGE to the one image in
# localhost/vllm-gateway-ci/<name>.
# shellcheck disable=SC2034 # used by the scripts that source this file
ci_repository=localhost/vllm-gateway-ci

# Every REPOSITORY:TAG on this machine. The reference filter lists every name
# of each matching image (other repositories too): keep REPOSITORY's own.
names_of() { # names_of REPOSITORY
  podman images --filter "reference=$1" --format '{{.Repository}}:{{.Tag}}' \
    | awk -v repository="$1:" 'index($0, repository) == 1' | sort -u
}

# Remove those of the images that have lost their last name (an older build,
# a replaced base); podman refuses while a container or a child image still
# uses one, and then it stays.
remove_unnamed() { # remove_unnamed ID...
  local id
  for id in "$@"; do
    if [ "$(podman image inspect --format '{{len .RepoTags}}' "$id" 2>/dev/null)" = 0 ]; then
      podman rmi "$id" >/dev/null 2>&1 || true
    fi
  done
}

# Tag IMAGE as REPOSITORY:TAG and drop every other tag of REPOSITORY, so that
# exactly one version is found there (not a stale one from an older package).
name_only() { # name_only IMAGE REPOSITORY TAG
  local image="$1" wanted="$2:$3" name old=()
  for name in $(names_of "$2"); do
    old+=("$(podman image inspect --format '{{.Id}}' "$name")")
    if [ "$name" != "$wanted" ]; then podman untag "$name" "$name"; fi
  done
  podman tag "$image" "$wanted"
  remove_unnamed "${old[@]}"
}

# Earlier versions of this step tagged their images with upstream names
# (python:3.11.14-slim-bookworm, prom/prometheus:v3.5.0, redis:7) and with
# handles of their own. Drop those names, but only where the image is one this
# step made (its base carries the vllm-gateway.inputs label): a genuine
# upstream image pulled on another machine keeps its name.
drop_earlier_names() {
  local repository name old=()
  # The service images before the base they were built on: a base with
  # children stays.
  for repository in docker.io/prom/prometheus docker.io/library/redis localhost/vllm-gateway-prometheus \
    localhost/vllm-gateway-redis docker.io/library/python localhost/vllm-gateway-base; do
    for name in $(names_of "$repository"); do
      if [ -n "$(podman image inspect --format '{{index .Labels "vllm-gateway.inputs"}}' "$name")" ]; then
        old+=("$(podman image inspect --format '{{.Id}}' "$name")")
        podman untag "$name" "$name"
        printf '[containers setup] dropped the name %s\n' "$name"
      fi
    done
  done
  if [ "${#old[@]}" -gt 0 ]; then remove_unnamed "${old[@]}"; fi
}
