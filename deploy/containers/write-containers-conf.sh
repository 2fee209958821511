#!/usr/bin/env bash
# Write podman's engine configuration for this kind of host (root in a
# sandbox, no systemd, hybrid cgroups), replacing the file only when its
# content changes.
#
#   write-containers-conf.sh /etc/containers/containers.conf
set -euo pipefail
target="$1"

# Podman as root asks for 1048576 open files and as many processes as it
# likes; a sandbox may not raise its limits ("setrlimit RLIMIT_NOFILE:
# Operation not permitted"), so containers get exactly the host's hard limits.
nofile="$(ulimit -Hn)"
nproc="$(cat /proc/sys/kernel/pid_max)"
if [ "$nofile" = unlimited ]; then nofile=1048576; fi

wanted="# Written by the project's deploy/containers/setup.sh.
[containers]
default_ulimits = [\"nofile=${nofile}:${nofile}\", \"nproc=${nproc}:${nproc}\"]

[engine]
# crun refuses hybrid cgroup hierarchies; runc runs on them.
runtime = \"runc\"
# No systemd here: cgroups are managed directly and events go to a file.
cgroup_manager = \"cgroupfs\"
events_logger = \"file\"
"

if [ -f "$target" ] && [ "$(cat "$target")" = "$(printf '%s' "$wanted")" ]; then
  exit 0
fi
mkdir -p "$(dirname "$target")"
printf '%s' "$wanted" >"$target"
echo "[containers setup] wrote $target"
