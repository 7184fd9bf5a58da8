// Package podnetwork is the kind testbed's pod network, in the spirit of
// kind's kindnetd but built here: on every node it writes a CNI config
// (ptp veths, host-local addresses from the node's podCIDR, portmap) and
// routes every other node's podCIDR via that node's InternalIP. All nodes
// share one L2 network (Docker's bridge), so routes are all it takes; no
// masquerading, because the testbed is offline.
package podnetwork

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpulab/gpulab/testbeds/kind/internal/command"
)

// ConfigFile is the CNI config the kubelet's runtime reads.
const ConfigFile = "10-gpulab.conflist"

// Route is one podCIDR reached through another node.
type Route struct {
	Dst netip.Prefix
	Via netip.Addr
}

func (r Route) String() string { return r.Dst.String() + " via " + r.Via.String() }

// Config renders the CNI config list for a node's podCIDR.
func Config(podCIDR string, mtu int) ([]byte, error) {
	prefix, err := netip.ParsePrefix(podCIDR)
	if err != nil {
		return nil, fmt.Errorf("podCIDR %q: %w", podCIDR, err)
	}
	def := "0.0.0.0/0"
	if prefix.Addr().Is6() {
		def = "::/0"
	}
	ptp := map[string]any{
		"type": "ptp",
		"ipam": map[string]any{
			"type":   "host-local",
			"ranges": [][]map[string]string{{{"subnet": prefix.Masked().String()}}},
			"routes": []map[string]string{{"dst": def}},
		},
	}
	if mtu > 0 {
		ptp["mtu"] = mtu
	}
	return json.MarshalIndent(map[string]any{
		"cniVersion": "1.0.0",
		"name":       "gpulab",
		"plugins":    []any{ptp, map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}}},
	}, "", "  ")
}

// Routes are the routes node self needs: every other node's podCIDRs via
// its first InternalIP of the same family. Nodes without either are left
// out until they have both.
func Routes(self string, nodes []corev1.Node) []Route {
	var routes []Route
	for _, n := range nodes {
		if n.Name == self {
			continue
		}
		cidrs := n.Spec.PodCIDRs
		if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
			cidrs = []string{n.Spec.PodCIDR}
		}
		for _, c := range cidrs {
			dst, err := netip.ParsePrefix(c)
			if err != nil {
				continue
			}
			for _, a := range n.Status.Addresses {
				ip, err := netip.ParseAddr(a.Address)
				if a.Type == corev1.NodeInternalIP && err == nil && ip.Is4() == dst.Addr().Is4() {
					routes = append(routes, Route{Dst: dst.Masked(), Via: ip})
					break
				}
			}
		}
	}
	slices.SortFunc(routes, func(a, b Route) int { return a.Dst.Addr().Compare(b.Dst.Addr()) })
	return routes
}

// Options configures Run.
type Options struct {
	// NodeName is this node. Required.
	NodeName string
	// Client reads Nodes. Required.
	Client kubernetes.Interface
	// ConfigDir is where the CNI config is written. Defaults to /etc/cni/net.d.
	ConfigDir string
	// Interval between syncs. Defaults to 10s.
	Interval time.Duration
	// MTU of pod interfaces; 0 lets the plugin choose.
	MTU int
	// Log receives one line per change. Defaults to io.Discard.
	Log io.Writer
}

// Run syncs the CNI config and the routes until ctx ends.
func Run(ctx context.Context, opts Options) error {
	if opts.NodeName == "" || opts.Client == nil {
		return errors.New("podnetwork: NodeName and Client are required")
	}
	if opts.ConfigDir == "" {
		opts.ConfigDir = "/etc/cni/net.d"
	}
	if opts.Interval <= 0 {
		opts.Interval = 10 * time.Second
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	for {
		if err := sync(ctx, opts); err != nil {
			fmt.Fprintln(opts.Log, "sync:", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(opts.Interval):
		}
	}
}

func sync(ctx context.Context, opts Options) error {
	list, err := opts.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	var errs []error
	for _, n := range list.Items {
		if n.Name != opts.NodeName {
			continue
		}
		if n.Spec.PodCIDR == "" {
			return fmt.Errorf("node %s has no podCIDR yet", n.Name)
		}
		conf, err := Config(n.Spec.PodCIDR, opts.MTU)
		if err != nil {
			return err
		}
		changed, err := writeIfChanged(filepath.Join(opts.ConfigDir, ConfigFile), conf)
		if err != nil {
			errs = append(errs, err)
		} else if changed {
			fmt.Fprintf(opts.Log, "wrote %s for podCIDR %s\n", ConfigFile, n.Spec.PodCIDR)
		}
	}
	for _, r := range Routes(opts.NodeName, list.Items) {
		if err := command.Run(ctx, command.Cmd{Name: "ip", Args: []string{"route", "replace", r.Dst.String(), "via", r.Via.String()}}); err != nil {
			errs = append(errs, fmt.Errorf("route %s: %w", r, err))
		}
	}
	return errors.Join(errs...)
}

// writeIfChanged replaces a file atomically when its content differs, so
// the runtime never reads half a config.
func writeIfChanged(path string, data []byte) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return false, err
	}
	return true, os.Rename(tmp, path)
}
