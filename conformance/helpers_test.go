package conformance

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/conformance/bare"
	"github.com/gpulab/gpulab/conformance/cleanup"
	"github.com/gpulab/gpulab/conformance/footprint"
	"github.com/gpulab/gpulab/conformance/measure"
	"github.com/gpulab/gpulab/conformance/rbac"
	"github.com/gpulab/gpulab/internal/poll"
	"github.com/gpulab/gpulab/testbeds/local"
)

// scenario is one assessment's namespace with a recorder watching it, and
// what it created there.
type scenario struct {
	t        *testing.T
	feature  string
	ns       string
	ownNS    bool // created for the scenario, deleted with it
	c        client.Client
	recorder *measure.Recorder
	checked  bool
	created  []client.Object
	gangs    map[string]client.Object
	// floor reconciles the scenario's bare gangs (--workload=bare).
	floor *bare.Floor
	// owned are the GPUCluster names it created, and its GPUJob names +
	// "-"; the recorder reads them from its own goroutine.
	ownedMu sync.Mutex
	owned   []string
}

func (s *scenario) own(name string) {
	s.ownedMu.Lock()
	defer s.ownedMu.Unlock()
	s.owned = append(s.owned, name)
}

// owns says whether a GPUCluster is one the scenario made.
func (s *scenario) owns(cluster string) bool {
	s.ownedMu.Lock()
	defer s.ownedMu.Unlock()
	return ownedCluster(cluster, s.owned)
}

var nsSeq int

// newScenario starts a scenario in a fresh namespace, or in --namespace
// when one was given, and starts watching it.
func newScenario(ctx context.Context, t *testing.T, feature string) *scenario {
	t.Helper()
	s := &scenario{t: t, feature: feature, ns: opts.Namespace, c: cluster.Client, gangs: map[string]client.Object{}}
	if s.ns == "" {
		nsSeq++
		// The whole run id: runs a-1 and b-1 must not share a namespace.
		s.ns, s.ownNS = cleanup.ScenarioNamespace(feature, nsSeq, opts.RunID), true
		// Restricted Pod Security: the runner's admission policy admits
		// no other namespace, and the suite's pods all meet it.
		labels := runLabels()
		labels[rbac.EnforceLabel] = "restricted"
		if err := s.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns, Labels: labels}}); err != nil {
			fatalf(t, "creating namespace: %v", err)
		}
	}
	in := measure.RecorderInput{Config: cluster.Config, Scheme: local.Scheme, Namespace: s.ns, Workload: workload().recorded(),
		NativeGangs: nativeGangs(), Claims: draMode()}
	if !s.ownNS {
		// A shared namespace: judge only what this scenario made.
		in.Follow = s.owns
	}
	rec, err := measure.Start(ctx, in)
	if err != nil {
		fatalf(t, "starting watches: %v", err)
	}
	s.recorder = rec
	t.Cleanup(s.cleanup)
	if w, ok := workload().(selfReconciled); ok {
		if err := w.reconcile(ctx, s); err != nil {
			fatalf(t, "starting the suite's own reconciler of %ss: %v", workload().recorded().Kind(), err)
		}
	}
	return s
}

// add creates obj in the scenario's namespace with the run's label and
// remembers it for cleanup.
func (s *scenario) add(ctx context.Context, obj client.Object) error {
	obj.SetNamespace(s.ns)
	label(obj)
	if err := s.c.Create(ctx, obj); err != nil {
		return err
	}
	s.created = append(s.created, obj)
	return nil
}

// cleanup checks the invariants if the assessment stopped before it did
// (a failed wait still leaves evidence worth reporting), then deletes what
// the scenario made and waits until its pods are gone, so the next
// scenario finds the capacity free.
func (s *scenario) cleanup() {
	if !s.checked {
		s.checkInvariants()
	}
	if s.floor != nil {
		s.floor.Stop()
	}
	s.recorder.Stop()
	ctx := context.Background()
	if s.ownNS {
		_ = s.c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.ns}})
	} else {
		for i := len(s.created) - 1; i >= 0; i-- {
			_ = s.c.Delete(ctx, s.created[i], client.PropagationPolicy(metav1.DeletePropagationBackground))
		}
	}
	// The scenario's pods only: its namespace's when it is its own, else
	// those with the run's label (every pod the run causes has it).
	sel := &client.ListOptions{Namespace: s.ns, LabelSelector: labels.SelectorFromSet(runLabels())}
	var namespaces []string
	if s.ownNS {
		namespaces = []string{s.ns}
	}
	if err := cleanup.WaitPodsGone(ctx, s.c, sel, namespaces, 2*time.Minute, scenarioPollInterval); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", currentAssessment(), err)
	}
}

// scenarioPollInterval is how often a scenario's cleanup checks its pods
// are gone: a namespace-scoped metadata list, cheap enough to keep the
// wait before the next scenario short.
const scenarioPollInterval = 200 * time.Millisecond

// gang creates a gang of the run's workload and tells the recorder when
// and how big.
func (s *scenario) gang(ctx context.Context, name string, groups ...workerGroup) {
	s.t.Helper()
	desired := gangPods(groups)
	obj := workload().build(name, groups)
	s.own(name)
	s.recorder.Expect(name, desired, time.Now())
	if err := s.add(ctx, obj); err != nil {
		fatalf(s.t, "creating %s %s: %v", workload().recorded().Kind(), name, err)
	}
	s.gangs[name] = obj
	if w, ok := workload().(selfReconciled); ok {
		if err := w.created(ctx, s, obj); err != nil {
			fatalf(s.t, "creating %s %s's children: %v", workload().recorded().Kind(), name, err)
		}
	}
}

// gangPods is a gang's pod count: its head and every worker.
func gangPods(groups []workerGroup) int {
	n := 1
	for _, g := range groups {
		n += int(g.n)
	}
	return n
}

// createParallelism is how many creations of a burst are in flight at
// once: one at a time would measure the suite's round trips, not how the
// operator takes a burst.
const createParallelism = 16

// gangsAtOnce creates a gang per name, all alike, createParallelism at a
// time for every workload. Each gang's clock starts as its own create is
// issued (the wait for a slot is outside it; the recorder then starts it
// at the object's creation, as the server recorded it). A workload the
// suite reconciles itself (bare) reacts to each gang the moment its
// object exists, on a goroutine of its own outside the create slots, as
// an operator with unbounded workers would; gangsAtOnce returns once
// every reaction has.
func (s *scenario) gangsAtOnce(ctx context.Context, names []string, groups ...workerGroup) {
	s.t.Helper()
	desired := gangPods(groups)
	objs := make([]client.Object, len(names))
	for i, name := range names {
		objs[i] = workload().build(name, groups)
		objs[i].SetNamespace(s.ns)
		label(objs[i])
		s.own(name)
	}
	// Every gang created is recorded before a failed create fails the
	// assessment, so the scenario's cleanup deletes all of them.
	var after func(i int) error
	if w, ok := workload().(selfReconciled); ok {
		after = func(i int) error { return w.created(ctx, s, objs[i]) }
	}
	created, err := cleanup.CreateAll(ctx, s.c, objs, createParallelism, func(i int) { s.recorder.Expect(names[i], desired, time.Now()) }, after)
	for _, obj := range created {
		s.created = append(s.created, obj)
		s.gangs[obj.GetName()] = obj
	}
	if err != nil {
		fatalf(s.t, "creating %ss: %v", workload().recorded().Kind(), err)
	}
}

// gpuCluster is a GPUCluster of one worker group of n pods × gpus, placed
// in the footprint but not created (for the checks that create their own).
func gpuCluster(name string, n, gpus int32) *gpulabv1alpha1.GPUCluster {
	return gpuClusters{}.build(name, []workerGroup{{"workers", n, gpus}}).(*gpulabv1alpha1.GPUCluster)
}

func (s *scenario) get(ctx context.Context, name string) *gpulabv1alpha1.GPUCluster {
	gc := &gpulabv1alpha1.GPUCluster{}
	if err := s.c.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: name}, gc); err != nil {
		return &gpulabv1alpha1.GPUCluster{}
	}
	return gc
}

// waitReady waits until the gang is Ready (gangReady), failing the
// assessment with the last state seen.
func (s *scenario) waitReady(ctx context.Context, name string, timeout time.Duration) {
	s.t.Helper()
	err := waitFor(ctx, timeout, func() (bool, string) {
		return gangReady(s.recorder.Timelines()[name]), workload().describe(ctx, s, name)
	})
	if err != nil {
		fatalf(s.t, "%s %s not Ready: %v", workload().recorded().Kind(), name, err)
	}
}

// delete deletes a gang the scenario made.
func (s *scenario) delete(ctx context.Context, name string) {
	s.t.Helper()
	obj, ok := s.gangs[name]
	if !ok {
		fatalf(s.t, "no gang %s to delete", name)
	}
	err := s.c.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		fatalf(s.t, "deleting %s: %v", name, err)
	}
}

// checkInvariants fails the feature for every broken invariant the
// recorder saw: duplicate pods, gangs placed partly, pods created while
// their PodGroup did not exist, a status that claimed Ready early. It first
// lets pending verdicts (a partial binding within its grace, a lagging
// watch) settle, so none is dropped for being early.
func (s *scenario) checkInvariants() {
	s.t.Helper()
	s.checked = true
	if err := s.recorder.Settle(context.Background(), measure.DefaultBindStall+2*measure.DefaultPartialGrace+time.Second); err != nil {
		failf(s.t, "the recorder could not decide every invariant: %v", err)
	}
	for _, v := range s.recorder.Violations() {
		failf(s.t, "%s", v.What)
	}
}

func describe(gc *gpulabv1alpha1.GPUCluster) string {
	var conds []string
	for _, c := range gc.Status.Conditions {
		if c.Status != metav1.ConditionTrue {
			conds = append(conds, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message))
		}
	}
	return fmt.Sprintf("phase %q, ready %d/%d; %s", gc.Status.Phase, gc.Status.ReadyPods, gc.Status.DesiredPods, strings.Join(conds, "; "))
}

// waitFor polls cond until it holds, printing its detail on stderr at
// most every progressEvery so a long wait is never silent.
func waitFor(ctx context.Context, timeout time.Duration, cond func() (bool, string)) error {
	start := time.Now()
	next := start.Add(progressEvery)
	return poll.Until(ctx, timeout, func() (bool, string) {
		ok, detail := cond()
		if now := time.Now(); !ok && now.After(next) {
			next = now.Add(progressEvery)
			fmt.Fprintf(os.Stderr, "%s: %s, %.1f s\n", currentAssessment(), detail, now.Sub(start).Seconds())
		}
		return ok, detail
	})
}

// progressEvery is how often a long wait reports on stderr.
const progressEvery = 5 * time.Second

// freeCapacity is the pool's room now: its GPUs not requested by bound,
// live pods, its node size and its whole free nodes of that size.
func freeCapacity(ctx context.Context, c client.Client) (footprint.Room, error) {
	nodes, err := nodeRooms(ctx, c)
	if err != nil {
		return footprint.Room{}, err
	}
	var pool []footprint.Node
	for _, n := range nodes {
		if fp.has(n.Name) {
			pool = append(pool, n)
		}
	}
	return footprint.RoomOf(pool), nil
}

// createJob creates a GPUJob whose submitter stays in the footprint (its
// cluster template comes from gpuCluster) and runs --submitter-image.
func (s *scenario) createJob(ctx context.Context, j *gpulabv1alpha1.GPUJob) error {
	sub := &j.Spec.Submitter
	placePod(&sub.Spec, opts.SubmitImage)
	for i := range sub.Spec.Containers {
		sub.Spec.Containers[i].Command = []string{"sleep", "2"}
	}
	sub.Labels = runLabels()
	s.own(j.Name + "-")
	return s.add(ctx, j)
}

// gpuNodes are the pool's nodes (the GPU nodes the run may use), sorted
// by name.
func gpuNodes(ctx context.Context, c client.Client) ([]corev1.Node, error) {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return nil, err
	}
	var out []corev1.Node
	for _, n := range nodes.Items {
		if fp.has(n.Name) {
			out = append(out, n)
		}
	}
	return out, nil
}

// fillNode holds every GPU of one whole free pool node with a plain pod,
// kept to that node by affinity, and waits until it is bound; the scenario
// deletes it with the rest. It returns the node's name. Volcano places it,
// in the run's queue, as it places the gangs: bound by another scheduler,
// it could be missing from Volcano's snapshot when the next gang comes, and
// both would be given the same GPUs.
func (s *scenario) fillNode(ctx context.Context) string {
	s.t.Helper()
	rooms, err := nodeRooms(ctx, s.c)
	if err != nil {
		fatalf(s.t, "reading capacity: %v", err)
	}
	var node *footprint.Node
	for i := range rooms {
		if fp.has(rooms[i].Name) && rooms[i].Free == rooms[i].GPUs {
			node = &rooms[i]
			break
		}
	}
	if node == nil {
		skipf(s.t, "no whole free node in the footprint to fill")
	}
	tmpl := podTemplate("filler", int32(node.GPUs))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "filler", Labels: tmpl.Labels}, Spec: tmpl.Spec}
	if draMode() {
		// The node's GPUs held the way the gangs ask for them: a claim.
		pod = s.draPodFor(ctx, "filler", node.GPUs, node.Name)
	}
	pod.Annotations = map[string]string{schedulingv1beta1.QueueNameAnnotationKey: fp.queue}
	pod.Spec.SchedulerName = "volcano"
	pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node.Name}}},
		}}},
	}}
	if err := s.add(ctx, pod); err != nil {
		fatalf(s.t, "creating the filler pod: %v", err)
	}
	err = waitFor(ctx, opts.ReadyTimeout, func() (bool, string) {
		if err := s.c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err.Error()
		}
		return pod.Spec.NodeName != "", fmt.Sprintf("filler for %s not bound", node.Name)
	})
	if err != nil {
		fatalf(s.t, "the filler pod holding %s's %d GPUs: %v", node.Name, node.GPUs, err)
	}
	return node.Name
}
