package conformance

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/e2e-framework/pkg/envconf"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/conformance/measure"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/node-agent/simulator"
)

// TestInventory: every GPU node has a GPUInventory that agrees with its
// allocatable nvidia.com/gpu and GFD labels; an unhealthy GPU is reported;
// every GPU has utilization and memory series (that one evidences KAR-0059;
// the others are gpulab's own). XID injection is only on the local
// profile, where the agent is simulated. nvidia-smi on real GPUs is the
// accelerators feature (--real-gpus).
func TestInventory(t *testing.T) {
	const name = "inventory"
	f := newPlan(name).
		assess(results.RequirementNone, "every GPU node's inventory agrees with its allocatable and labels", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			needGPULab(t)
			c := cluster.Client
			var nodes corev1.NodeList
			if err := c.List(ctx, &nodes, client.MatchingLabels(opts.NodeSelector)); err != nil {
				fatalf(t, "%v", err)
			}
			checked := 0
			for _, n := range nodes.Items {
				alloc := n.Status.Allocatable["nvidia.com/gpu"]
				if alloc.Value() == 0 {
					continue
				}
				checked++
				var inv gpulabv1alpha1.GPUInventory
				if err := c.Get(ctx, client.ObjectKey{Name: n.Name}, &inv); err != nil {
					failf(t, "node %s has %d GPUs but no GPUInventory: %v", n.Name, alloc.Value(), err)
					continue
				}
				sum := inv.Status.Summary
				if int64(sum.Healthy) != alloc.Value() && int64(sum.Count) != alloc.Value() {
					failf(t, "node %s: allocatable nvidia.com/gpu %d, inventory %d GPUs (%d healthy)", n.Name, alloc.Value(), sum.Count, sum.Healthy)
				}
				if p := n.Labels["nvidia.com/gpu.product"]; p != sum.Product {
					failf(t, "node %s: label nvidia.com/gpu.product %q, inventory %q", n.Name, p, sum.Product)
				}
				if m := n.Labels["nvidia.com/gpu.memory"]; m != strconv.FormatInt(sum.MemoryMiB, 10) {
					failf(t, "node %s: label nvidia.com/gpu.memory %q, inventory %d MiB", n.Name, m, sum.MemoryMiB)
				}
			}
			if checked == 0 {
				fatalf(t, "no node --node-selector allows advertises nvidia.com/gpu")
			}
			return ctx
		}).
		assessIf(opts.Profile == "local", "XIDs can be injected only into the local testbed's simulated agent", results.RequirementNone, "a GPU with a critical XID is reported Unhealthy", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			c := cluster.Client
			var nodes corev1.NodeList
			if err := c.List(ctx, &nodes); err != nil || len(nodes.Items) == 0 {
				fatalf(t, "listing nodes: %v", err)
			}
			node := nodes.Items[len(nodes.Items)-1].Name
			if err := cordonWithXID(ctx, c, node, "2:79"); err != nil {
				fatalf(t, "injecting an XID: %v", err)
			}
			var inv gpulabv1alpha1.GPUInventory
			err := waitFor(ctx, time.Minute, func() (bool, string) {
				if err := c.Get(ctx, client.ObjectKey{Name: node}, &inv); err != nil {
					return false, err.Error()
				}
				for _, g := range inv.Status.GPUs {
					if g.Index == 2 && g.Health.State == gpulabv1alpha1.GPUUnhealthy && g.Health.LastXID != nil && *g.Health.LastXID == 79 {
						return inv.Status.Summary.Healthy == inv.Status.Summary.Count-1, fmt.Sprintf("healthy %d of %d", inv.Status.Summary.Healthy, inv.Status.Summary.Count)
					}
				}
				return false, fmt.Sprintf("GPU 2 of %s not Unhealthy with XID 79", node)
			})
			if err != nil {
				failf(t, "the injected XID was not reported: %v", err)
			}
			return ctx
		}).
		assess(results.RequirementAcceleratorMetrics, "every GPU has utilization and memory series", func(ctx context.Context, t *testing.T, _ *envconf.Config) context.Context {
			needGPULab(t)
			have, source := gpuSeries(ctx, t)
			var invs gpulabv1alpha1.GPUInventoryList
			if err := cluster.Client.List(ctx, &invs); err != nil {
				fatalf(t, "%v", err)
			}
			selected := selectedNodes(ctx, t)
			var uuids []string
			for _, inv := range invs.Items {
				if selected != nil && !selected[inv.Name] {
					continue
				}
				for _, g := range inv.Status.GPUs {
					uuids = append(uuids, g.UUID)
				}
			}
			if len(uuids) == 0 {
				fatalf(t, "no GPUInventory lists a GPU")
			}
			missing, exporters := measure.MissingGPUSeries(have, uuids)
			for _, m := range missing {
				failf(t, "%s, from %s", m, source)
			}
			t.Logf("%d GPUs checked against %s (series from %v)", len(uuids), source, exporters)
			return ctx
		}).feature()
	testenv.Test(t, f)
}

// needGPULab skips an assessment of gpulab's agent where gpulab is not
// installed (a KubeRay or Volcano Job cluster measured as it is).
func needGPULab(t *testing.T) {
	t.Helper()
	if !cluster.HasGPULab {
		skipf(t, "gpulab's GPUInventory CRD is not installed")
	}
}

// gpuSeries reads which GPUs have per-GPU series: from --prometheus-url
// when given (any cluster, gpulab's or DCGM's exporter), else straight from
// the local testbed's agent.
func gpuSeries(ctx context.Context, t *testing.T) (measure.UUIDsByMetric, string) {
	if opts.PrometheusURL != "" {
		have, err := measure.UUIDsInPrometheus(ctx, opts.PrometheusURL)
		if err != nil {
			fatalf(t, "%v", err)
		}
		return have, "Prometheus at " + opts.PrometheusURL
	}
	url := cluster.AgentMetricsURL(ctx)
	if url == "" {
		skipf(t, "needs --prometheus-url: a Prometheus that scrapes gpulab's agent or NVIDIA's DCGM exporter")
	}
	s, err := measure.ScrapeURL(ctx, url)
	if err != nil {
		fatalf(t, "scraping the agent: %v", err)
	}
	return measure.UUIDsInScrape(s), "the local agent's " + url
}

// selectedNodes are the nodes --node-selector allows, read in one list
// (the API server filters them); nil when no selector was given.
func selectedNodes(ctx context.Context, t *testing.T) map[string]bool {
	if len(opts.NodeSelector) == 0 {
		return nil
	}
	var nodes corev1.NodeList
	if err := cluster.Client.List(ctx, &nodes, client.MatchingLabels(opts.NodeSelector)); err != nil {
		fatalf(t, "listing the nodes --node-selector allows: %v", err)
	}
	selected := map[string]bool{}
	for _, n := range nodes.Items {
		selected[n.Name] = true
	}
	return selected
}

// cordonWithXID asks the local testbed's simulated agent to deliver XIDs. The
// node is cordoned first: its sick GPU stays sick until the agent restarts,
// and later features size themselves from schedulable nodes.
func cordonWithXID(ctx context.Context, c client.Client, node, xids string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var n corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: node}, &n); err != nil {
			return err
		}
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[simulator.XIDAnnotation] = xids
		n.Spec.Unschedulable = true
		return c.Update(ctx, &n)
	})
}
