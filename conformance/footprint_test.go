package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/conformance/footprint"
	"github.com/gpulab/gpulab/internal/gfd"
)

// RunIDLabel marks everything a run creates, so its cleanup, on success,
// failure or a signal, finds all of it.
const RunIDLabel = "conformance.gpulab.io/run-id"

// footprint is where the run may put pods, decided once at setup: a pool
// of GPU nodes whose GPUs add up to at most --max-gpus, and the Volcano
// queue every gang goes to (capability --max-gpus unless one was given).
// Pods are pinned to the pool, so no scenario can grow past the budget
// even where Volcano would find room elsewhere.
type runFootprint struct {
	pool   []footprint.Node
	inPool map[string]bool
	queue  string
	// pinned is false with --max-gpus=all: the pool is then every
	// schedulable GPU node, which GPU requests select anyway, and an
	// affinity term per node would make every pod (and each operator's
	// copies of it) grow with the fleet.
	pinned bool
}

var fp runFootprint

// nodeRooms lists the schedulable GPU nodes that match --node-selector,
// with the GPUs that bound, live pods already request.
func nodeRooms(ctx context.Context, c client.Client) ([]footprint.Node, error) {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes, client.MatchingLabels(opts.NodeSelector)); err != nil {
		return nil, err
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods); err != nil {
		return nil, err
	}
	used := map[string]int64{}
	for i := range pods.Items {
		used[pods.Items[i].Spec.NodeName] += footprint.BoundGPUs(&pods.Items[i])
	}
	var rooms []footprint.Node
	for _, n := range nodes.Items {
		alloc := n.Status.Allocatable[gfd.GPUResource]
		if n.Spec.Unschedulable || alloc.Value() == 0 {
			continue
		}
		rooms = append(rooms, footprint.Node{Name: n.Name, GPUs: int(alloc.Value()), Free: int(alloc.Value() - used[n.Name])})
	}
	return rooms, nil
}

// setupFootprint picks the pool and the queue.
func setupFootprint(ctx context.Context) error {
	rooms, err := nodeRooms(ctx, cluster.Client)
	if err != nil {
		return fmt.Errorf("listing GPU nodes: %w", err)
	}
	if len(rooms) == 0 {
		return fmt.Errorf("no schedulable node advertises %s%s", gfd.GPUResource, selectorNote())
	}
	pool := footprint.Pool(rooms, opts.MaxGPUs)
	if len(pool) == 0 {
		return fmt.Errorf("no GPU node fits --max-gpus=%s (the smallest has %d GPUs)", opts.MaxGPUs.String(), smallest(rooms))
	}
	fp = runFootprint{pool: pool, inPool: map[string]bool{}, pinned: !opts.MaxGPUs.All}
	gpus := 0
	for _, n := range pool {
		fp.inPool[n.Name] = true
		gpus += n.GPUs
	}
	if err := checkNamespace(ctx); err != nil {
		return err
	}
	if opts.Queue != "" {
		var q schedulingv1beta1.Queue
		if err := cluster.Client.Get(ctx, client.ObjectKey{Name: opts.Queue}, &q); err != nil {
			return fmt.Errorf("--queue %s: %w", opts.Queue, err)
		}
		fp.queue = opts.Queue
		return nil
	}
	q := &schedulingv1beta1.Queue{
		ObjectMeta: metav1.ObjectMeta{Name: "gpulab-conformance-" + opts.RunID, Labels: runLabels()},
		Spec:       schedulingv1beta1.QueueSpec{Weight: 1, Reclaimable: new(true)},
	}
	if !opts.MaxGPUs.All {
		q.Spec.Capability = corev1.ResourceList{gfd.GPUResource: *resource.NewQuantity(int64(opts.MaxGPUs.GPUs), resource.DecimalSI)}
	}
	if err := cluster.Client.Create(ctx, q); err != nil {
		return fmt.Errorf("creating the run's Volcano queue: %w", err)
	}
	fp.queue = q.Name
	fmt.Printf("footprint: %d GPUs on %d nodes (--max-gpus=%s), queue %s\n", gpus, len(pool), opts.MaxGPUs.String(), fp.queue)
	return nil
}

// checkNamespace makes sure --namespace exists: a cluster's must already
// (the suite does not create what it would not delete); on the local
// profile the suite owns the testbed and creates it.
func checkNamespace(ctx context.Context) error {
	if opts.Namespace == "" {
		return nil
	}
	err := cluster.Client.Get(ctx, client.ObjectKey{Name: opts.Namespace}, &corev1.Namespace{})
	switch {
	case apierrors.IsNotFound(err) && cluster.Profile == "local":
		return cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opts.Namespace}})
	case err != nil:
		return fmt.Errorf("--namespace %s: %w", opts.Namespace, err)
	}
	return nil
}

func selectorNote() string {
	if len(opts.NodeSelector) == 0 {
		return ""
	}
	return fmt.Sprintf(" with labels %v (--node-selector)", opts.NodeSelector)
}

func smallest(nodes []footprint.Node) int {
	gpus := nodes[0].GPUs
	for _, n := range nodes {
		gpus = min(gpus, n.GPUs)
	}
	return gpus
}

func runLabels() map[string]string { return map[string]string{RunIDLabel: opts.RunID} }

// label marks obj as the run's.
func label(obj client.Object) {
	l := obj.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[RunIDLabel] = opts.RunID
	obj.SetLabels(l)
}

// placePod pins a pod to the pool (under a GPU budget) and --node-selector, tolerates the GPU
// taint GPU nodes commonly carry, and sets the image when one is given.
func placePod(spec *corev1.PodSpec, image string) {
	if image != "" {
		for i := range spec.Containers {
			spec.Containers[i].Image = image
		}
	}
	if len(opts.NodeSelector) > 0 && spec.NodeSelector == nil {
		spec.NodeSelector = map[string]string{}
	}
	for k, v := range opts.NodeSelector {
		spec.NodeSelector[k] = v
	}
	spec.Tolerations = append(spec.Tolerations, corev1.Toleration{Key: string(gfd.GPUResource), Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	if !fp.pinned {
		return
	}
	// A node-name field selector takes one value, so one term (ORed) per
	// pool node; node names, unlike hostname labels, are always unique.
	terms := make([]corev1.NodeSelectorTerm, 0, len(fp.pool))
	for _, n := range fp.pool {
		terms = append(terms, corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{
			{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{n.Name}}}})
	}
	spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
	}}
}

// cleanupRun deletes what the run created and is still there (a scenario
// cut short, a signal): GPUJobs, GPUClusters and pods labelled with the
// run id, the namespaces it created, then its queue once their pods are
// gone. It never touches anything without the run's label.
// cleanupTimeout is how long a run's pods may take to go: 3 minutes, or
// 150 ms a pod when there are more. Deleting 3,000 pods through kwok on a
// 1,253-node testbed went at 15 a second, so 3 minutes failed a teardown
// that was only slow.
func cleanupTimeout(pods int) time.Duration {
	return max(3*time.Minute, time.Duration(pods)*150*time.Millisecond)
}

func cleanupRun(ctx context.Context) error {
	c := cluster.Client
	sel := client.MatchingLabels(runLabels())
	var errs []error
	del := func(obj client.Object) {
		err := c.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground))
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting %T %s/%s: %w", obj, obj.GetNamespace(), obj.GetName(), err))
		}
	}
	var jobs gpulabv1alpha1.GPUJobList
	var gcs gpulabv1alpha1.GPUClusterList
	var pods corev1.PodList
	var nss corev1.NamespaceList
	for _, list := range []client.ObjectList{&jobs, &gcs, &pods, &nss} {
		if err := c.List(ctx, list, sel); err != nil {
			errs = append(errs, fmt.Errorf("listing the run's objects: %w", err))
		}
	}
	var owned []string
	for i := range jobs.Items {
		owned = append(owned, jobs.Items[i].Name+"-")
		del(&jobs.Items[i])
	}
	for i := range gcs.Items {
		owned = append(owned, gcs.Items[i].Name)
		del(&gcs.Items[i])
	}
	for i := range pods.Items {
		del(&pods.Items[i])
	}
	namespaces := map[string]bool{}
	for i := range nss.Items {
		namespaces[nss.Items[i].Name] = true
		del(&nss.Items[i])
	}
	err := waitFor(ctx, cleanupTimeout(len(pods.Items)), func() (bool, string) {
		var left corev1.PodList
		if err := c.List(ctx, &left); err != nil {
			return false, err.Error()
		}
		n := 0
		for _, p := range left.Items {
			if namespaces[p.Namespace] || p.Labels[RunIDLabel] == opts.RunID || ownedCluster(p.Labels[gpulabv1alpha1.ClusterLabel], owned) {
				n++
			}
		}
		return n == 0, fmt.Sprintf("%d of the run's pods left", n)
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("cleaning up run %s: %w", opts.RunID, err))
	}
	var queues schedulingv1beta1.QueueList
	if err := c.List(ctx, &queues, sel); err != nil {
		errs = append(errs, err)
	}
	for i := range queues.Items {
		del(&queues.Items[i])
	}
	return errors.Join(errs...)
}

// ownedCluster says whether gc is one of the named GPUClusters, or a
// GPUJob's cluster (a name ending in "-").
func ownedCluster(gc string, names []string) bool {
	if gc == "" {
		return false
	}
	for _, n := range names {
		if gc == n || (strings.HasSuffix(n, "-") && strings.HasPrefix(gc, n)) {
			return true
		}
	}
	return false
}
