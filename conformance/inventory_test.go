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
			samples, source, intervals := gpuSeries(ctx, t)
			var cov measure.Coverage
			var checked string
			if cluster.HasGPULab {
				uuids := inventoryUUIDs(ctx, t)
				cov = measure.CheckGPUSeries(samples, uuids)
				checked = fmt.Sprintf("%d GPUs of the GPUInventories", len(uuids))
			} else {
				// A cluster without gpulab (DCGM's exporter alone): the
				// GPUs are what each node's allocatable advertises, found
				// in the series by their Hostname label.
				advertised := advertisedGPUs(ctx, t)
				cov = measure.CheckNodeGPUSeries(samples, advertised)
				total := int64(0)
				for _, n := range advertised {
					total += n
				}
				checked = fmt.Sprintf("%d GPUs the allocatable of %d nodes advertises", total, len(advertised))
			}
			for _, m := range cov.Failures {
				failf(t, "%s, from %s", m, source)
			}
			t.Logf("%s checked against %s: %d with fresh series (from %v; freshness within 2 scrape intervals, %s); %d MIG instances on %d GPUs",
				checked, source, cov.Covered, cov.Exporters, intervals, cov.MIGInstances, len(cov.MIG))
			for _, m := range cov.MIG {
				t.Logf("MIG: %s", m)
			}
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

// gpuSeries reads the newest sample of every per-GPU series: from
// --prometheus-url when given (any cluster, gpulab's or DCGM's exporter),
// else straight from the local testbed's agent. It also says where the
// scrape intervals that judge freshness came from.
func gpuSeries(ctx context.Context, t *testing.T) ([]measure.GPUSample, string, string) {
	if opts.PrometheusURL != "" {
		p, err := measure.NewPrometheus(opts.PrometheusURL, opts.PrometheusBearerTokenFile, opts.PrometheusCAFile)
		if err != nil {
			fatalf(t, "%v", err)
		}
		samples, intervals, err := measure.GPUSamplesInPrometheus(ctx, p)
		if err != nil {
			fatalf(t, "%v", err)
		}
		return samples, "Prometheus at " + opts.PrometheusURL, "scrape intervals from " + intervals
	}
	url := cluster.AgentMetricsURL(ctx)
	if url == "" {
		skipf(t, "needs --prometheus-url: a Prometheus that scrapes gpulab's agent or NVIDIA's DCGM exporter")
	}
	s, err := measure.ScrapeURL(ctx, url)
	if err != nil {
		fatalf(t, "scraping the agent: %v", err)
	}
	return measure.GPUSamplesInScrape(s, time.Now()), "the local agent's " + url, "read directly"
}

// inventoryUUIDs are the GPUs the GPUInventories of the nodes
// --node-selector allows list.
func inventoryUUIDs(ctx context.Context, t *testing.T) []string {
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
	return uuids
}

// advertisedGPUs is, per node --node-selector allows, the GPU devices its
// allocatable offers (nvidia.com/gpu and nvidia.com/mig-*); nodes with
// none are left out.
func advertisedGPUs(ctx context.Context, t *testing.T) map[string]int64 {
	var nodes corev1.NodeList
	if err := cluster.Client.List(ctx, &nodes, client.MatchingLabels(opts.NodeSelector)); err != nil {
		fatalf(t, "listing the nodes --node-selector allows: %v", err)
	}
	out := map[string]int64{}
	for _, n := range nodes.Items {
		if g := measure.AdvertisedGPUs(n); g > 0 {
			out[n.Name] = g
		}
	}
	if len(out) == 0 {
		fatalf(t, "no node --node-selector allows advertises nvidia.com/gpu or nvidia.com/mig-*")
	}
	return out
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
