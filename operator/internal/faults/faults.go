// Package faults breaks one gpulab invariant on purpose, by wrapping the
// operator's client, so that the conformance suite can prove it catches a
// broken operator (conformance/faults). Only operator builds made with
// -tags gpulab_faults link it (operator/internal/manager/faults_on.go); a
// test in this package checks that a normal build does not.
package faults

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

// EnvVar names the fault a test build plants.
const EnvVar = "GPULAB_PLANTED_FAULT"

// The planted faults.
const (
	// PodsBeforePodGroup swallows the first PodGroup create of each gang
	// (reported success, nothing created), so the gang's pods are created
	// before its PodGroup exists; the next reconcile creates it.
	PodsBeforePodGroup = "pods-before-podgroup"
	// DuplicatePod creates a copy named <name>-dup after the first pod
	// create of each gang: two live pods in one slot.
	DuplicatePod = "duplicate-pod"
	// WrongMinMember writes every PodGroup with minMember 1, no
	// minTaskMember and no minResources, so Volcano may bind part of a gang
	// when only part of it fits.
	WrongMinMember = "wrong-minmember"
	// PodAfterPodGroupDeleted deletes the gang's PodGroup before the first
	// pod create of each gang, so pods are created while no PodGroup exists;
	// the operator recreates it on the deletion event.
	PodAfterPodGroupDeleted = "pod-after-podgroup-deleted"
	// ReadyEarly claims phase Ready and Ready=True on a gang's GPUCluster
	// as soon as its first pod is created, and in every status write that
	// is not yet Ready. The claim at the first pod does not depend on when
	// the operator writes status: a healthy operator may write its first
	// status only once a fast gang is really Ready.
	ReadyEarly = "ready-early"
)

// Names lists every fault, in the order above.
var Names = []string{PodsBeforePodGroup, DuplicatePod, WrongMinMember, PodAfterPodGroupDeleted, ReadyEarly}

// SlowPodCreate breaks no invariant: it waits DelayEnvVar (default
// DefaultSlowPodCreateDelay) before each pod create, a planted slowdown
// that the nightly's noise-aware compare must flag.
const SlowPodCreate = "slow-pod-create"

// DelayEnvVar sets SlowPodCreate's wait, as a Go duration.
const DelayEnvVar = "GPULAB_PLANTED_DELAY"

// DefaultSlowPodCreateDelay is SlowPodCreate's wait when DelayEnvVar is
// unset.
const DefaultSlowPodCreateDelay = 100 * time.Millisecond

// NewClientFunc returns a ctrl.Options.NewClient that builds the manager's
// usual client (cache reads, direct writes) and wraps it with fault; nil
// for no fault, an error for an unknown one.
func NewClientFunc(fault string) (client.NewClientFunc, error) {
	if fault == "" {
		return nil, nil
	}
	if _, err := funcsFor(fault); err != nil {
		return nil, err
	}
	return func(cfg *rest.Config, opts client.Options) (client.Client, error) {
		c, err := client.NewWithWatch(cfg, opts)
		if err != nil {
			return nil, err
		}
		ctrl.Log.WithName("faults").Info("planted fault active: this operator breaks an invariant on purpose", "fault", fault)
		return Wrap(c, fault)
	}, nil
}

// Wrap returns c with fault planted.
func Wrap(c client.WithWatch, fault string) (client.WithWatch, error) {
	funcs, err := funcsFor(fault)
	if err != nil {
		return nil, err
	}
	return interceptor.NewClient(c, funcs), nil
}

func funcsFor(fault string) (interceptor.Funcs, error) {
	g := &gangs{done: map[string]bool{}, once: map[string]*sync.Once{}}
	switch fault {
	case PodsBeforePodGroup:
		return interceptor.Funcs{Create: g.swallowFirstPodGroup}, nil
	case DuplicatePod:
		return interceptor.Funcs{Create: g.duplicateFirstPod}, nil
	case WrongMinMember:
		return interceptor.Funcs{Create: lowerMinMemberOnCreate, Update: lowerMinMemberOnUpdate}, nil
	case PodAfterPodGroupDeleted:
		return interceptor.Funcs{Create: g.deletePodGroupBeforeFirstPod}, nil
	case ReadyEarly:
		return interceptor.Funcs{SubResourceUpdate: claimReady, Create: g.claimReadyAtFirstPod}, nil
	case SlowPodCreate:
		delay, err := slowPodCreateDelay(os.Getenv(DelayEnvVar))
		if err != nil {
			return interceptor.Funcs{}, err
		}
		return interceptor.Funcs{Create: delayPodCreate(delay)}, nil
	}
	return interceptor.Funcs{}, fmt.Errorf("unknown %s %q: want one of %s", EnvVar, fault, strings.Join(append(slices.Clone(Names), SlowPodCreate), ", "))
}

func slowPodCreateDelay(s string) (time.Duration, error) {
	if s == "" {
		return DefaultSlowPodCreateDelay, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive Go duration such as 80ms", DelayEnvVar, s)
	}
	return d, nil
}

// delayPodCreate waits before each pod create, as a slower operator
// would; the context still cancels the wait.
func delayPodCreate(delay time.Duration) func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
	return func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
		if _, ok := obj.(*corev1.Pod); ok {
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		return c.Create(ctx, obj, opts...)
	}
}

// gangs remembers which gangs a fault has already hit: each fault strikes
// once per gang, so the operator still converges and the suite's failure
// names the fault rather than a timeout.
type gangs struct {
	mu   sync.Mutex
	done map[string]bool
	once map[string]*sync.Once
}

// first says whether this is the first call for key, and marks it.
func (g *gangs) first(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done[key] {
		return false
	}
	g.done[key] = true
	return true
}

// onceFor is key's Once: its Do blocks concurrent callers until the first
// finishes, so none of the gang's parallel pod creates overtakes it.
func (g *gangs) onceFor(key string) *sync.Once {
	g.mu.Lock()
	defer g.mu.Unlock()
	o, ok := g.once[key]
	if !ok {
		o = &sync.Once{}
		g.once[key] = o
	}
	return o
}

// gangKey is namespace/cluster for objects the GPUCluster controller makes.
func gangKey(obj client.Object) (string, bool) {
	cluster := obj.GetLabels()[gpulabv1alpha1.ClusterLabel]
	return obj.GetNamespace() + "/" + cluster, cluster != ""
}

func (g *gangs) swallowFirstPodGroup(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
	if _, ok := obj.(*schedulingv1beta1.PodGroup); ok {
		if key, ok := gangKey(obj); ok && g.first(key) {
			return nil
		}
	}
	return c.Create(ctx, obj, opts...)
}

func (g *gangs) duplicateFirstPod(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
	pod, ok := obj.(*corev1.Pod)
	key, owned := gangKey(obj)
	if !ok || !owned {
		return c.Create(ctx, obj, opts...)
	}
	// Copied before the create fills in server fields (resourceVersion,
	// uid) that a second create must not carry.
	dup := pod.DeepCopy()
	if err := c.Create(ctx, obj, opts...); err != nil {
		return err
	}
	if g.first(key) {
		dup.Name += "-dup"
		if err := c.Create(ctx, dup, opts...); err != nil && !apierrors.IsAlreadyExists(err) {
			ctrl.Log.WithName("faults").Error(err, "creating the duplicate pod", "pod", dup.Name)
		}
	}
	return nil
}

func (g *gangs) claimReadyAtFirstPod(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
	if err := c.Create(ctx, obj, opts...); err != nil {
		return err
	}
	key, owned := gangKey(obj)
	if _, isPod := obj.(*corev1.Pod); !isPod || !owned || !g.first(key) {
		return nil
	}
	gc := &gpulabv1alpha1.GPUCluster{}
	err := c.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: obj.GetLabels()[gpulabv1alpha1.ClusterLabel]}, gc)
	if err == nil {
		claim(gc)
		err = c.Status().Update(ctx, gc)
	}
	if err != nil {
		ctrl.Log.WithName("faults").Error(err, "claiming Ready at the first pod", "gang", key)
	}
	return nil
}

func lowerMinMember(obj client.Object) {
	if pg, ok := obj.(*schedulingv1beta1.PodGroup); ok {
		// minTaskMember and minResources would each still hold the gang
		// back; without them one bound pod satisfies Volcano's gang plugin.
		pg.Spec.MinMember = 1
		pg.Spec.MinTaskMember = nil
		pg.Spec.MinResources = nil
	}
}

func lowerMinMemberOnCreate(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
	lowerMinMember(obj)
	return c.Create(ctx, obj, opts...)
}

func lowerMinMemberOnUpdate(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
	lowerMinMember(obj)
	return c.Update(ctx, obj, opts...)
}

func (g *gangs) deletePodGroupBeforeFirstPod(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
	group := obj.GetAnnotations()[schedulingv1beta1.KubeGroupNameAnnotationKey]
	key, owned := gangKey(obj)
	if _, ok := obj.(*corev1.Pod); ok && owned && group != "" {
		g.onceFor(key).Do(func() {
			pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: obj.GetNamespace(), Name: group}}
			if err := c.Delete(ctx, pg); err != nil && !apierrors.IsNotFound(err) {
				ctrl.Log.WithName("faults").Error(err, "deleting the PodGroup before the first pod", "podGroup", group)
			}
		})
	}
	return c.Create(ctx, obj, opts...)
}

// notYetReady are the phases a healthy operator writes before every pod is
// Ready; the others (Unschedulable, Suspended, Failed) stay honest so the
// fault only claims readiness that is merely early.
var notYetReady = []gpulabv1alpha1.ClusterPhase{gpulabv1alpha1.ClusterPending, gpulabv1alpha1.ClusterScheduling, gpulabv1alpha1.ClusterProvisioning}

func claimReady(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if gc, ok := obj.(*gpulabv1alpha1.GPUCluster); ok && sub == "status" && slices.Contains(notYetReady, gc.Status.Phase) {
		claim(gc)
	}
	return c.SubResource(sub).Update(ctx, obj, opts...)
}

// claim sets gc's status to the false claim: phase Ready, Ready=True.
func claim(gc *gpulabv1alpha1.GPUCluster) {
	gc.Status.Phase = gpulabv1alpha1.ClusterReady
	meta.SetStatusCondition(&gc.Status.Conditions, metav1.Condition{
		Type: gpulabv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: gpulabv1alpha1.ReasonPodsReady,
		Message: fmt.Sprintf("all %d pods are Ready", gc.Status.DesiredPods), ObservedGeneration: gc.Generation,
	})
}
