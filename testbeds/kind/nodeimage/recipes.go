package nodeimage

import (
	"path/filepath"
	"strings"

	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/kind/images"
)

// Image tags kubeadm v1.37 expects (cmd/kubeadm/app/constants), except
// etcd: the testbed builds etcd EtcdTag and the cluster config tells
// kubeadm so (ClusterConfiguration etcd.local.imageTag).
const (
	Registry = "registry.k8s.io"
	PauseTag = "3.10.2"
)

// EtcdTag is the etcd image tag, in the upstream form <version>-0.
var EtcdTag = strings.TrimPrefix(binaries.EtcdVersion, "v") + "-0"

// Programs are the binaries a node image is made of.
type Programs struct {
	Set  *binaries.Set
	Kind *binaries.Kind
	// Built here from the gpulab module: the runtime shim, pause and the
	// pod network.
	Shim, Pause, Kindnet string
}

// KindnetRef is the pod network's image.
func KindnetRef() string { return "gpulab-kindnet:" + binaries.KubernetesVersion }

// ComponentImages are the images preloaded into every node: the control
// plane, kube-proxy, etcd, CoreDNS, pause and the pod network. A static
// binary gets a scratch image; what calls iptables or ip gets the base.
func ComponentImages(p Programs, base string) []images.Recipe {
	k8s := binaries.KubernetesVersion
	bin := func(name, src string) map[string]string { return map[string]string{"/usr/local/bin/" + name: src} }
	return []images.Recipe{
		{Ref: Registry + "/kube-apiserver:" + k8s, Base: "scratch", Files: bin("kube-apiserver", p.Set.KubeAPIServer)},
		{Ref: Registry + "/kube-controller-manager:" + k8s, Base: "scratch", Files: bin("kube-controller-manager", p.Set.KubeControllerManager)},
		{Ref: Registry + "/kube-scheduler:" + k8s, Base: "scratch", Files: bin("kube-scheduler", p.Set.KubeScheduler)},
		{Ref: Registry + "/kube-proxy:" + k8s, Base: base, Files: bin("kube-proxy", p.Kind.KubeProxy), Entrypoint: []string{"/usr/local/bin/kube-proxy"}},
		{Ref: Registry + "/etcd:" + EtcdTag, Base: "scratch", Files: bin("etcd", p.Set.Etcd)},
		{Ref: Registry + "/coredns/coredns:" + binaries.CoreDNSVersion, Base: "scratch",
			Files: map[string]string{"/coredns": p.Kind.CoreDNS}, Entrypoint: []string{"/coredns"}},
		{Ref: Registry + "/pause:" + PauseTag, Base: "scratch", Files: map[string]string{"/pause": p.Pause}, Entrypoint: []string{"/pause"}},
		{Ref: KindnetRef(), Base: base, Files: bin("gpulab-kindnet", p.Kindnet), Entrypoint: []string{"/usr/local/bin/gpulab-kindnet"}},
	}
}

// nodeFiles are the node's programs by their path in the node.
func nodeFiles(p Programs) map[string]string {
	files := map[string]string{
		"/usr/bin/kubelet":                       p.Kind.Kubelet,
		"/usr/bin/kubeadm":                       p.Kind.Kubeadm,
		"/usr/bin/kubectl":                       p.Set.Kubectl,
		"/usr/local/bin/containerd":              p.Kind.Containerd,
		"/usr/local/bin/ctr":                     p.Kind.Ctr,
		"/usr/local/bin/containerd-shim-runc-v2": p.Kind.ContainerdShimRuncV2,
		"/usr/local/bin/crictl":                  p.Kind.Crictl,
		"/usr/local/bin/gpulab-runc":             p.Shim,
	}
	for _, plugin := range []string{"ptp", "bridge", "loopback", "host-local", "portmap"} {
		files["/opt/cni/bin/"+plugin] = filepath.Join(p.Kind.CNIPluginsDir, plugin)
	}
	return files
}
