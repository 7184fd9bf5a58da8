package conformance

import (
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/footprint"
	"github.com/gpulab/gpulab/conformance/profile"
	"github.com/gpulab/gpulab/conformance/rbac"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/internal/gfd"
)

// dryRun prints what a run would do on this cluster, creating nothing.
func dryRun(ctx context.Context) int {
	rooms, where, err := dryRunRooms(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "conformance: dry run: %v\n", err)
		return results.ExitFailed
	}
	printPlan(os.Stdout, where, rooms)
	printRequirements(ctx, os.Stdout, rooms)
	if cluster != nil {
		printMIG(ctx)
	}
	printDisruptive(ctx, os.Stdout)
	return results.ExitPassed
}

// dryRunRooms reads the cluster's GPU nodes (read-only), or for the local
// profile describes the fleet it would create.
func dryRunRooms(ctx context.Context) ([]footprint.Node, string, error) {
	if opts.Profile == "local" {
		fleet, err := profile.LocalFleet(profile.Options{Fleet: opts.Fleet, Scale: opts.Scale})
		if err != nil {
			return nil, "", err
		}
		var rooms []footprint.Node
		for _, n := range fleet.Nodes() {
			gpus := n.Status.Allocatable[gfd.GPUResource]
			rooms = append(rooms, footprint.Node{Name: n.Name, GPUs: int(gpus.Value()), Free: int(gpus.Value())})
		}
		return rooms, fmt.Sprintf("a new local testbed %q", opts.TestbedName), nil
	}
	if opts.Profile == "kind" {
		// The CLI refuses it first (RunOptions.validate) with the command that works.
		return nil, "", fmt.Errorf("--profile=kind creates its cluster first; dry-run an existing one with --profile=cluster --kubeconfig")
	}
	env, err := profile.Connect(ctx, profile.Options{Kubeconfig: opts.Kubeconfig, Context: opts.Context, OperatorNamespace: opts.OperatorNamespace, Workload: opts.Workload,
		NativeGangs: nativeGangs()})
	if err != nil {
		return nil, "", err
	}
	cluster = env
	rooms, err := nodeRooms(ctx, env.Client)
	// Connect checked every permission (it fails naming what is missing).
	return rooms, fmt.Sprintf("cluster %q (%s); preflight: all %d permissions of the %s ClusterRole granted; %s",
		env.Name, env.Config.Host, rbac.Verbs(rbac.Rules()), rbac.Name, env.Confinement), err
}

func printPlan(w io.Writer, where string, nodes []footprint.Node) {
	fmt.Fprintf(w, "dry run on %s (--workload=%s): nothing is created\n", where, opts.Workload)
	pool := footprint.Pool(nodes, opts.MaxGPUs)
	room := footprint.RoomOf(pool)
	free, whole, gpus := room.Free, room.Whole, 0
	var names []string
	for _, n := range pool {
		gpus += n.GPUs
		names = append(names, fmt.Sprintf("%s (%d/%d free)", n.Name, n.Free, n.GPUs))
	}
	fmt.Fprintf(w, "eligible GPU nodes: %d%s\n", len(nodes), selectorNote())
	fmt.Fprintf(w, "footprint: --max-gpus=%s: %d nodes, %d GPUs, %d free, %d whole free %d-GPU nodes\n  %s\n",
		opts.MaxGPUs.String(), len(pool), gpus, free, whole, room.NodeGPUs, strings.Join(names, "\n  "))
	if opts.Queue != "" {
		fmt.Fprintf(w, "queue: %s (given; the budget is kept by sizing and the pool)\n", opts.Queue)
	} else {
		fmt.Fprintf(w, "queue: gpulab-conformance-%s, created with capability nvidia.com/gpu=%s, deleted after\n", opts.RunID, opts.MaxGPUs.String())
	}
	if opts.Namespace != "" {
		fmt.Fprintf(w, "namespace: %s (given; only the run's objects are deleted)\n", opts.Namespace)
	} else {
		fmt.Fprintf(w, "namespaces: one per scenario, gpulab-conformance-<feature>-<n>-<run>, deleted after\n")
	}
	fmt.Fprintf(w, "everything carries %s=%s\n\nplan (sizes from the free capacity now; each scenario re-reads it):\n", RunIDLabel, opts.RunID)
	shape := func(n, workers, gpus int) string {
		return fmt.Sprintf("%d x (1 head + %d workers x %d GPUs) = %d GPUs", n, workers, gpus, n*workers*gpus)
	}
	fits, over := footprint.Overcommitted(room)
	node, lw := room.NodeGPUs, footprint.LatencyWorkerGPUs(room)
	lines := []struct{ feature, what string }{
		{"latency", fmt.Sprintf("create at once: %s", shape(footprint.LatencyClusters(opts.Scale, room), 2, lw))},
		{"latency", fmt.Sprintf("overcommitted: %d gangs of 2 x %d GPUs, %d fit at once%s", over, node, fits, needs(fits >= 1, "2 whole free nodes"))},
		{"gang", fmt.Sprintf("fits: %s; too big: a filler pod holds one node, then %d GPUs; %d contending gangs of %d x %d; exact fill: %s%s",
			shape(1, 2, node), free-node+1, footprint.ContendingGangs, whole/2, node, shape(1, whole, node), needs(whole >= 2, "2 whole free nodes"))},
		{"controller", fmt.Sprintf("valid: %s; leader failover: 1 head + 48 CPU-only workers", shape(1, 2, lw))},
		{"inventory", "reads GPUInventories, nodes and per-GPU series; XID injection on the local profile only"},
		{"job", fmt.Sprintf("2 GPUJobs of %s %s%s", shape(1, footprint.JobWorkers(room, jobQueued()), node), jobLimit(), needs(whole >= 1, "a whole free node"))},
	}
	lines = append(lines, struct{ feature, what string }{"autoscaling", ascPlan()})
	if opts.RealGPUs {
		lines = append(lines, struct{ feature, what string }{"accelerators", fmt.Sprintf("nvidia-smi pods on each of the %d pool nodes, one node at a time", len(pool))})
	}
	for _, l := range lines {
		if featureSelected(l.feature) {
			fmt.Fprintf(w, "  %-12s %s\n", l.feature, l.what)
		}
	}
}

// printRequirements is the "What PASSED needs" table for this run: which
// requirements it asks for, and what it lacks to evidence each.
func printRequirements(ctx context.Context, w io.Writer, nodes []footprint.Node) {
	in := results.PlanInput{
		Ask: opts.Ask(), Profile: opts.Profile, Disruptive: opts.Disruptive, Prometheus: opts.PrometheusURL != "",
		WholeFreeNodes: footprint.RoomOf(footprint.Pool(nodes, opts.MaxGPUs)).Whole,
		GPULab:         true, DeviceClass: opts.DeviceClass,
		MaxNewNodes: opts.MaxNewNodes,
	}
	if !opts.NoAutoscaler() {
		in.Autoscaler = opts.Autoscaler
	}
	if cluster != nil {
		in.GPULab = cluster.HasGPULab
		// Any answer but the class itself (absent, DRA not served, not
		// allowed to look) means the dra feature would skip.
		if err := cluster.Client.Get(ctx, client.ObjectKey{Name: opts.DeviceClass}, &resourceapi.DeviceClass{}); err != nil {
			in.DeviceClass = ""
		}
		if found := findAutoscaler(ctx); found.name != "none" {
			in.Autoscaler = found.name
		} else {
			in.Autoscaler = ""
		}
	}
	fmt.Fprintln(w, "\nrequirements (asked ones this run cannot evidence make it PARTIAL; --requirements narrows what is asked):")
	for _, p := range results.PlanRequirements(in) {
		fmt.Fprintf(w, "  %s\n", p)
	}
}

// jobLimit is what lets the job feature's gangs run only one at a time.
func jobLimit() string {
	if jobQueued() {
		return "on a queue for one"
	}
	return "that the free nodes fit one at a time"
}

func needs(ok bool, what string) string {
	if ok {
		return ""
	}
	return " (SKIPPED: needs " + what + ", so the run would be PARTIAL)"
}

func featureSelected(name string) bool {
	if opts.Features != "" && !regexp.MustCompile(opts.Features).MatchString(name) {
		return false
	}
	return opts.SkipFeatures == "" || !regexp.MustCompile(opts.SkipFeatures).MatchString(name)
}

// printDisruptive lists every action of the run beyond its own labelled
// objects, whether the run would take it, and on a cluster who leads now.
func printDisruptive(ctx context.Context, w io.Writer) {
	acts := opts.DisruptiveActions()
	fmt.Fprintf(w, "\ndisruptive actions (--disruptive=%t):\n", opts.Disruptive)
	if len(acts) == 0 {
		fmt.Fprintln(w, "  none in the features selected")
	}
	for _, a := range acts {
		verdict := "WOULD TAKE"
		if !a.Taken {
			verdict = "not taken: " + a.Why
		}
		fmt.Fprintf(w, "  %-12s %s\n               (%s) %s\n", a.Feature, a.What, a.Assessment, verdict)
		if a.Feature == "controller" && a.Taken && cluster != nil {
			fmt.Fprintf(w, "               now: %s\n", leaderNow(ctx))
		}
	}
	if cluster == nil {
		return
	}
	// Over-capacity gangs are the run's own, but with reclaim or preempt
	// on, the scheduler may make room for them by evicting others' pods.
	evicting, where := schedulerActions(ctx)
	verdict := "run: the scheduler evicts no running pod for a pending gang"
	switch {
	case len(evicting) > 0 && opts.Disruptive:
		verdict = "WOULD RUN with " + strings.Join(evicting, " and ") + " on (--disruptive)"
	case len(evicting) > 0:
		verdict = "SKIPPED: " + strings.Join(evicting, " and ") + " on, --disruptive not given"
	case strings.HasPrefix(where, "not visible"):
		verdict = "run: the scheduler's actions are unknown"
	}
	fmt.Fprintf(w, "  %-12s over-capacity gangs (gang: too big, contending; latency: overcommitted; job: a queue for one)\n               Volcano's scheduler configuration: %s; %s\n",
		"gang/latency", where, verdict)
}

// leaderNow says which operator pod leads and which could take over.
func leaderNow(ctx context.Context) string {
	pod, err := cluster.LeaderPod(ctx)
	if err != nil {
		return fmt.Sprintf("no pod to kill (%v): the assessment would be skipped", err)
	}
	standbys, err := cluster.Standbys(ctx, pod)
	switch {
	case err != nil:
		return fmt.Sprintf("%s/%s leads; its replicas could not be listed: %v", pod.Namespace, pod.Name, err)
	case len(standbys) == 0:
		return fmt.Sprintf("%s/%s leads with no second replica Ready: the assessment would be skipped, nothing killed", pod.Namespace, pod.Name)
	}
	return fmt.Sprintf("%s/%s leads; Ready to take over: %s", pod.Namespace, pod.Name, strings.Join(standbys, ", "))
}
