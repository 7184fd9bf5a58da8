package binaries

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
)

// Versions of what a kind node runs besides the control plane. CoreDNS is
// the version kubeadm v1.37 deploys (cmd/kubeadm/app/constants); the CNI
// plugins and cri-tools follow the Kubernetes minor.
const (
	ContainerdVersion = "v2.4.2"
	CRIToolsVersion   = "v1.37.0"
	CNIPluginsVersion = "v1.10.0"
	CoreDNSVersion    = "v1.14.6"
)

// kubernetesNodeCommands are the k8s.io/kubernetes programs of a kind node.
var kubernetesNodeCommands = []string{"kubelet", "kubeadm", "kube-proxy"}

// kubernetesNode builds the node programs in their own throwaway module.
var kubernetesNode = component{
	name:     "kubernetes-node",
	version:  KubernetesVersion,
	binaries: kubernetesNodeCommands,
	build:    buildKubernetes("kubernetes-node", kubernetesNodeCommands),
}

// containerd 2.x (kubelet 1.37 needs the CRI RuntimeConfig call). The
// btrfs, devmapper and zfs snapshotters need cgo or host tools a kind node
// does not have; overlayfs and native stay.
var containerd = component{
	name:     "containerd",
	version:  ContainerdVersion,
	binaries: []string{"containerd", "ctr", "containerd-shim-runc-v2"},
	build: func(ctx context.Context, b *builder, out string) error {
		const mod = "github.com/containerd/containerd/v2"
		ldflags := append([]string{"-s", "-w"}, ldflagsX(mod+"/version", map[string]string{
			"Version": ContainerdVersion, "Package": "github.com/containerd/containerd/v2",
		})...)
		return b.goCmd(ctx, out, "containerd", []string{"GOBIN=" + out}, "install", "-trimpath",
			"-tags=no_btrfs,no_devmapper,no_zfs", "-ldflags="+strings.Join(ldflags, " "),
			mod+"/cmd/containerd@"+ContainerdVersion, mod+"/cmd/ctr@"+ContainerdVersion,
			mod+"/cmd/containerd-shim-runc-v2@"+ContainerdVersion)
	},
}

var crictl = component{
	name:     "crictl",
	version:  CRIToolsVersion,
	binaries: []string{"crictl"},
	build: func(ctx context.Context, b *builder, out string) error {
		ldflags := "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=" + CRIToolsVersion
		return b.goCmd(ctx, out, "crictl", []string{"GOBIN=" + out}, "install", "-trimpath", "-ldflags="+ldflags,
			"sigs.k8s.io/cri-tools/cmd/crictl@"+CRIToolsVersion)
	},
}

// cniPluginNames are the reference plugins a kind node's pod network uses:
// ptp veths with host-local addresses (as kind's own CNI does), loopback,
// portmap for hostPort, bridge for single-node setups.
var cniPluginNames = map[string]string{
	"ptp": "main/ptp", "bridge": "main/bridge", "loopback": "main/loopback",
	"host-local": "ipam/host-local", "portmap": "meta/portmap",
}

var cniPlugins = component{
	name:     "cni-plugins",
	version:  CNIPluginsVersion,
	binaries: []string{"ptp", "bridge", "loopback", "host-local", "portmap"},
	build: func(ctx context.Context, b *builder, out string) error {
		args := []string{"install", "-trimpath", "-ldflags=-s -w"}
		for _, name := range []string{"ptp", "bridge", "loopback", "host-local", "portmap"} {
			args = append(args, "github.com/containernetworking/plugins/plugins/"+cniPluginNames[name]+"@"+CNIPluginsVersion)
		}
		return b.goCmd(ctx, out, "cni-plugins", []string{"GOBIN=" + out}, args...)
	},
}

// corednsPlugins are the directives of the Corefile kubeadm writes, in
// CoreDNS's own execution order (its plugin.cfg), and the package of each.
// Building only these, rather than CoreDNS's full list, saves compiling
// every cloud SDK.
var corednsPlugins = [][2]string{
	{"reload", "reload"}, {"health", "health"}, {"ready", "ready"}, {"prometheus", "metrics"},
	{"errors", "errors"}, {"log", "log"}, {"loadbalance", "loadbalance"}, {"cache", "cache"},
	{"kubernetes", "kubernetes"}, {"forward", "forward"}, {"loop", "loop"},
}

// coredns is a throwaway main that registers those plugins and runs
// CoreDNS's own coremain.
var coredns = component{
	name:     "coredns",
	version:  CoreDNSVersion,
	binaries: []string{"coredns"},
	build: func(ctx context.Context, b *builder, out string) error {
		src, err := b.srcDir("coredns", CoreDNSVersion)
		if err != nil {
			return err
		}
		var main strings.Builder
		main.WriteString("package main\n\nimport (\n\t\"github.com/coredns/coredns/core/dnsserver\"\n\t\"github.com/coredns/coredns/coremain\"\n")
		directives := make([]string, 0, len(corednsPlugins))
		for _, p := range corednsPlugins {
			fmt.Fprintf(&main, "\t_ %q\n", "github.com/coredns/coredns/plugin/"+p[1])
			directives = append(directives, p[0])
		}
		fmt.Fprintf(&main, ")\n\nfunc init() { dnsserver.Directives = %#v }\n\nfunc main() { coremain.Run() }\n", directives)
		files := map[string]string{
			"go.mod":  fmt.Sprintf("module gpulab.local/build/coredns\n\ngo 1.26.0\n\nrequire github.com/coredns/coredns %s\n", CoreDNSVersion),
			"main.go": main.String(),
		}
		if err := writeFiles(src, files); err != nil {
			return err
		}
		if err := b.goCmd(ctx, src, "coredns", nil, "mod", "tidy"); err != nil {
			return err
		}
		ldflags := "-s -w -X github.com/coredns/coredns/coremain.GitCommit=" + CoreDNSVersion
		return b.goCmd(ctx, src, "coredns", nil, "build", "-trimpath", "-ldflags="+ldflags, "-o", filepath.Join(out, "coredns"), ".")
	},
}

// kindComponents are what a kind node image holds besides the testbed's
// control-plane binaries; none is built unless EnsureKind is called.
var kindComponents = []component{containerd, crictl, cniPlugins, coredns, kubernetesNode}

// Kind is the absolute paths of a kind node's programs.
type Kind struct {
	Kubelet, Kubeadm, KubeProxy           string
	Containerd, Ctr, ContainerdShimRuncV2 string
	Crictl                                string
	// CNIPluginsDir holds ptp, bridge, loopback, host-local and portmap.
	CNIPluginsDir string
	CoreDNS       string
}

// EnsureKind builds a kind node's programs if they are missing from the cache.
func EnsureKind(ctx context.Context, opts Options) (*Kind, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &builder{opts: opts}
	if err := b.ensureAll(ctx, kindComponents); err != nil {
		return nil, err
	}
	return &Kind{
		Kubelet:              b.path(kubernetesNode, "kubelet"),
		Kubeadm:              b.path(kubernetesNode, "kubeadm"),
		KubeProxy:            b.path(kubernetesNode, "kube-proxy"),
		Containerd:           b.path(containerd, "containerd"),
		Ctr:                  b.path(containerd, "ctr"),
		ContainerdShimRuncV2: b.path(containerd, "containerd-shim-runc-v2"),
		Crictl:               b.path(crictl, "crictl"),
		CNIPluginsDir:        cniPlugins.dir(opts.CacheDir),
		CoreDNS:              b.path(coredns, "coredns"),
	}, nil
}
