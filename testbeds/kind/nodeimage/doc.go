// Package nodeimage builds the kind testbed's node image without a
// registry: a Debian bookworm base from debootstrap (systemd, iptables,
// Debian's runc, ...), the node's own files (entrypoint, systemd units,
// containerd's config, the pod network's manifest), containerd 2.x,
// crictl, the CNI plugins, kubelet, kubeadm and kubectl, and the
// control-plane, kube-proxy, etcd, CoreDNS, pause and pod-network images,
// all built from binaries compiled here and preloaded into the node's
// containerd (k8s.io namespace). Every image is tagged by a hash of what
// it holds, so a rebuild happens only when something in it changed.
package nodeimage
