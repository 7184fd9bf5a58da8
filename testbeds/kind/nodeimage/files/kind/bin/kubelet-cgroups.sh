#!/bin/bash
# Runs before the kubelet (systemd ExecStartPre): makes the cgroup root the
# kubelet is configured with (/kubelet) exist. On cgroup v2 it also
# delegates every controller to it, which only works once systemd has moved
# the entrypoint out of the root cgroup, so it cannot happen earlier.
set -o errexit -o nounset -o pipefail
if [[ ! -f /sys/fs/cgroup/cgroup.controllers ]]; then
  mkdir -p /sys/fs/cgroup/systemd/kubelet
  exit 0
fi
delegate() {
  local controllers
  controllers="$(cat "/sys/fs/cgroup/$1/cgroup.controllers")"
  if [[ -n "$controllers" ]]; then
    echo "+${controllers// / +}" >"/sys/fs/cgroup/$1/cgroup.subtree_control"
  fi
}
delegate .
for root in kubelet kubelet.slice; do
  mkdir -p "/sys/fs/cgroup/$root"
  delegate "$root"
done
