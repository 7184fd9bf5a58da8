package conformance

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/gpulab/gpulab/conformance/cleanup"
	"github.com/gpulab/gpulab/conformance/footprint"
	"github.com/gpulab/gpulab/conformance/schedconf"
	"github.com/gpulab/gpulab/internal/gfd"
)

// RunIDLabel marks everything a run creates, so its cleanup, on success,
// failure, a signal or after a kill, finds all of it.
const RunIDLabel = cleanup.RunIDLabel

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
	// evicting are the scheduler's actions that can evict running pods
	// (schedconf); schedulerConf says where they were read, or why not.
	evicting      []string
	schedulerConf string
}

var fp runFootprint

// has says whether node is in the pool. Unpinned (--max-gpus=all), the
// pool is every GPU node the suite's pods can use now, as the scheduler
// sees them, not only those usable at setup: a node that turned Ready
// since would otherwise hold room a scenario did not count.
func (f runFootprint) has(node string) bool { return !f.pinned || f.inPool[node] }

// nodeRooms lists the GPU nodes that match --node-selector and that the
// suite's pods can use (footprint.Usable: not cordoned, no taint they do not
// tolerate), with the GPUs that bound, live pods already request.
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
	if draMode() {
		held, err := draHeld(ctx, c)
		if err != nil {
			return nil, err
		}
		for n, k := range held {
			used[n] += k
		}
	}
	var rooms []footprint.Node
	for _, n := range nodes.Items {
		alloc := n.Status.Allocatable[gfd.GPUResource]
		if ok, _ := footprint.Usable(&n); !ok || alloc.Value() == 0 {
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
	fp.evicting, fp.schedulerConf = schedulerActions(ctx)
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
	printMIG(ctx)
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

// schedulerActions reads which of Volcano's actions can evict running pods,
// and says where from. The local testbed's Volcano is the suite's own, with
// neither on; elsewhere the configuration may not be visible, which is
// said, and the run goes on.
func schedulerActions(ctx context.Context) ([]string, string) {
	if cluster.Profile == "local" {
		return nil, "the local testbed's own (enqueue, allocate, backfill)"
	}
	evicting, err := schedconf.Read(ctx, cluster.Client, opts.VolcanoNamespace)
	if err != nil {
		fmt.Printf("warning: Volcano's scheduler configuration is not visible (%v): if it enables reclaim or preempt, "+
			"the over-capacity scenarios may evict other tenants' pods; --disruptive is not required for them\n", err)
		return nil, fmt.Sprintf("not visible: %v", err)
	}
	return evicting, fmt.Sprintf("ConfigMap %s/%s", opts.VolcanoNamespace, schedconf.ConfigMapName)
}

// overCapacity guards a scenario that leaves gangs pending for want of
// room: with reclaim or preempt on, the scheduler could make that room by
// evicting other tenants' pods, so it runs only with --disruptive.
func overCapacity(t *testing.T) {
	t.Helper()
	if len(fp.evicting) > 0 && !opts.Disruptive {
		skipf(t, "Volcano's scheduler runs %s (%s): the run's over-capacity gangs could evict other tenants' pods; --disruptive allows this scenario",
			strings.Join(fp.evicting, " and "), fp.schedulerConf)
	}
}

// printMIG reports the MIG-partitioned nodes --node-selector allows: their
// MIG devices are not whole GPUs, and the gang features leave them alone.
func printMIG(ctx context.Context) {
	var nodes corev1.NodeList
	if err := cluster.Client.List(ctx, &nodes, client.MatchingLabels(opts.NodeSelector)); err != nil {
		return
	}
	for i := range nodes.Items {
		if mig := footprint.MIGDevices(&nodes.Items[i]); len(mig) > 0 {
			fmt.Printf("node %s is MIG-partitioned (%v): its MIG devices are not used by the gang features\n", nodes.Items[i].Name, mig)
		}
	}
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

// restrict makes a pod meet restricted Pod Security, which every scenario
// namespace enforces: non-root, the runtime's seccomp profile, no
// privilege escalation, no capabilities. Operators copy it from the
// templates to their pods (KubeRay to its injected init container too).
func restrict(spec *corev1.PodSpec) {
	yes, no := true, false
	uid := int64(65534)
	spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid,
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range cs {
			cs[i].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: &no,
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
		}
	}
}

// placePod pins a pod to the pool (under a GPU budget) and --node-selector, tolerates the GPU
// taint GPU nodes commonly carry, and sets the image when one is given.
func placePod(spec *corev1.PodSpec, image string) {
	restrict(spec)
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
	// With an autoscaler, pods are pinned to the footprint's nodes even
	// when it is the whole pool: a scenario sized to the free capacity must
	// not have the autoscaler grow it (no new node can have a pool node's
	// name), nor use a node the autoscaling feature left to consolidate.
	// (The autoscaling feature places its own pods: ascAffinity.)
	if !fp.pinned && asc.name != "karpenter" {
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
// cut short, a signal, the deadline): everything with the run's label
// (cleanup.Kinds, RayClusters and Volcano Jobs included, in --namespace
// too), then its queues once its pods are gone. It never touches anything
// without the run's label.
func cleanupRun(ctx context.Context) error {
	_, err := cleanup.Run(ctx, cleanup.Options{Client: cluster.Client, RunID: opts.RunID, Log: prefixed{os.Stdout, "cleanup: "}})
	if err != nil {
		return fmt.Errorf("cleaning up run %s (gpulab-conformance cleanup --run-id %s retries): %w", opts.RunID, opts.RunID, err)
	}
	return nil
}

// prefixed writes each line with a prefix.
type prefixed struct {
	w      io.Writer
	prefix string
}

func (p prefixed) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, p.prefix+string(b)); err != nil {
		return 0, err
	}
	return len(b), nil
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
