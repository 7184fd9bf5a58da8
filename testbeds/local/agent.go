package local

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/draclass"
	"github.com/gpulab/gpulab/internal/repo"
	"github.com/gpulab/gpulab/testbeds/binaries"
)

// agentBinary returns the gpulab-agent to run: the one given, or one built
// from this repository into the cache (cgo, a few seconds when warm).
func (t *Testbed) agentBinary(ctx context.Context) (string, error) {
	if t.opts.AgentBinary != "" {
		return filepath.Abs(t.opts.AgentBinary)
	}
	root, err := repo.Root()
	if err != nil {
		return "", fmt.Errorf("no agent binary given and not inside the repository: %w", err)
	}
	out := filepath.Join(t.opts.CacheDir, "bin", "gpulab-agent")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./node-agent/cmd/gpulab-agent")
	cmd.Dir = root
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=1", "CGO_CFLAGS="+binaries.CgoCFlags)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building gpulab-agent: %w\n%s", err, b)
	}
	return out, nil
}

// agentComponent runs one gpulab-agent that simulates every fake GPU node
// (a mock NVML per node, of the node's profile), so each has a GPUInventory
// and GFD labels written by the real publishing code, and with dra its
// DRA devices.
func agentComponent(workdir, kubeconfig, binary string, metricsPort int, dra bool) kwokComponent {
	c := kwokComponent{
		Name:    "gpulab-agent",
		Binary:  binary,
		WorkDir: workdir,
		Links:   []string{"kube-apiserver"},
		Args: []string{
			"--simulate-testbed-nodes",
			"--kubeconfig=" + kubeconfig,
			"--metrics-bind-address=" + net.JoinHostPort("127.0.0.1", strconv.Itoa(metricsPort)),
			"--interval=30s",
			"--lease-namespace=" + v1alpha1.DefaultHeartbeatLeaseNamespace,
		},
	}
	if dra {
		c.Args = append(c.Args, "--dra-driver="+draclass.DriverName)
	}
	return c
}

// applyDeviceClass creates the DeviceClass of the agent's DRA devices.
func applyDeviceClass(ctx context.Context, c client.Client) error {
	dc := draclass.GPUClass(draclass.DriverName)
	if err := c.Create(ctx, dc); err != nil && !isAlreadyExists(err) {
		return fmt.Errorf("creating DeviceClass %s: %w", dc.Name, err)
	}
	return nil
}

// createLeaseNamespace creates the namespace of the agent's heartbeat
// Leases, as the chart's release namespace is on a real cluster. Until it
// exists the agent's renewals fail and are retried.
func createLeaseNamespace(ctx context.Context, c client.Client) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.DefaultHeartbeatLeaseNamespace}}
	if err := c.Create(ctx, ns); err != nil && !isAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s for the agent's heartbeat Leases: %w", ns.Name, err)
	}
	return nil
}
