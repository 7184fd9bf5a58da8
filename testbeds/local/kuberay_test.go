package local

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// rayClusterManifest is a RayCluster of one head and one worker group of
// two pods with 4 GPUs each. kwok never pulls the image.
const rayClusterManifest = `
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: gang
  labels:
    ray.io/scheduler-name: volcano
spec:
  rayVersion: "2.46.0"
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-head
          image: rayproject/ray:2.46.0
          resources:
            limits: {cpu: "2", memory: 8Gi}
  workerGroupSpecs:
  - groupName: gpu
    replicas: 2
    minReplicas: 2
    maxReplicas: 2
    rayStartParams: {}
    template:
      spec:
        containers:
        - name: ray-worker
          image: rayproject/ray:2.46.0
          resources:
            limits: {cpu: "8", memory: 64Gi, nvidia.com/gpu: 4}
`

// TestKubeRayGangSchedulesThroughVolcano runs KubeRay's operator on the
// testbed and proves a RayCluster becomes one Volcano gang that binds and
// turns ready.
//
// What KubeRay v1.5.0 and v1.6.2 (--batch-scheduler=volcano) write, as
// seen here (v1.5.0 on Volcano v1.10.0, v1.6.2 on v1.14.1):
//
//   - One PodGroup per RayCluster, named ray-<cluster>-pg, in the
//     RayCluster's namespace, with no labels or annotations and one owner
//     reference: the RayCluster (apiVersion ray.io/v1, controller: true,
//     blockOwnerDeletion: true). minMember is the head plus the desired
//     workers (3 here); minResources sums their requests (cpu 18, memory
//     136Gi, nvidia.com/gpu 8 here); spec.queue is the RayCluster's
//     volcano.sh/queue-name label, empty without one (Volcano's scheduler
//     then uses its default queue; from v1.14 Volcano's PodGroup CRD
//     defaults it to "default", so the stored PodGroup says so).
//   - Every pod, head and workers, has schedulerName volcano, the
//     annotations scheduling.k8s.io/group-name: ray-<cluster>-pg and
//     volcano.sh/task-spec: headgroup (head) or <worker group name>
//     (workers), the head also ray.io/ft-enabled: "false"; the labels
//     ray.io/cluster: <cluster>, ray.io/node-type: head|worker, ray.io/group:
//     headgroup|<worker group name>, ray.io/identifier:
//     <cluster>-head|<cluster>-worker, ray.io/is-ray-node: "yes",
//     app.kubernetes.io/name: kuberay and app.kubernetes.io/created-by:
//     kuberay-operator (v1.6.2 adds ray.io/worker-group-replica-index to
//     workers); and one owner reference, the RayCluster (controller:
//     true). Pods are named <cluster>-head-<random> and
//     <cluster>-<group>-worker-<random>. A pod names its gang by the
//     group-name annotation and its RayCluster by ray.io/cluster (or the
//     owner reference).
//
// Neither version needs the ray.io/scheduler-name label: with
// --batch-scheduler=volcano every RayCluster gets a PodGroup; the label is
// set here as users do.
func TestKubeRayGangSchedulesThroughVolcano(t *testing.T) {
	t.Parallel()
	start := time.Now()
	fleet, err := ParseFleet("dgx-h100=2")
	if err != nil {
		t.Fatal(err)
	}
	tb := startForTest(t, Options{Name: "gpulab-kuberay", Fleet: fleet, Log: testLog{t}, KubeRay: true})
	t.Logf("testbed with KubeRay up in %s", time.Since(start).Round(100*time.Millisecond))
	ctx := t.Context()
	c, err := tb.Client()
	if err != nil {
		t.Fatal(err)
	}
	operatorPID := componentPID(t, tb, kubeRayComponent)
	status, err := tb.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !status.KubeRay || status.Ports.KubeRayMetrics == 0 || status.Ports.KubeRayHealthz == 0 {
		t.Errorf("status: KubeRay %v, ports metrics %d healthz %d; want KubeRay with both ports", status.KubeRay, status.Ports.KubeRayMetrics, status.Ports.KubeRayHealthz)
	}
	if err := httpHealth("http", status.Ports.KubeRayMetrics, "/metrics")(ctx); err != nil {
		t.Errorf("ray-operator metrics: %v", err)
	}

	ns := createNamespace(t, c, "kuberay")
	rc := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(rayClusterManifest), &rc.Object); err != nil {
		t.Fatal(err)
	}
	rc.SetNamespace(ns)
	created := time.Now()
	if err := c.Create(ctx, rc); err != nil {
		t.Fatalf("create RayCluster: %v", err)
	}

	const pgName = "ray-gang-pg"
	var pg schedulingv1beta1.PodGroup
	var pods []corev1.Pod
	state := func() string {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(rc.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(rc), got); err != nil {
			return "get: " + err.Error()
		}
		s, _, _ := unstructured.NestedString(got.Object, "status", "state")
		return s
	}
	var waiting string
	err = poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: pgName}, &pg); err != nil {
			waiting = "PodGroup " + pgName + ": " + err.Error()
			return false, client.IgnoreNotFound(err)
		}
		var list corev1.PodList
		if err := c.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{"ray.io/cluster": "gang"}); err != nil {
			return false, err
		}
		pods = list.Items
		ready := 0
		for i := range pods {
			if pods[i].Spec.NodeName != "" && podReady(&pods[i]) {
				ready++
			}
		}
		if len(pods) != 3 || ready != 3 {
			waiting = fmt.Sprintf("3 pods bound and Ready, have %d of %d: %s", ready, len(pods), describePods(pods))
			return false, nil
		}
		if s := state(); s != "ready" {
			waiting = fmt.Sprintf("RayCluster state ready, is %q", s)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("RayCluster not gang-scheduled and ready: waiting for %s: %v (ray-operator log: %s)", waiting, err, filepath.Join(tb.Workdir(), "logs", kubeRayComponent+".log"))
	}
	t.Logf("RayCluster ready %s after its creation", time.Since(created).Round(100*time.Millisecond))

	// The PodGroup: the whole cluster is one gang, owned by the RayCluster.
	if pg.Spec.MinMember != 3 {
		t.Errorf("PodGroup minMember %d, want 3 (head + 2 workers)", pg.Spec.MinMember)
	}
	if pg.Spec.MinResources == nil {
		t.Error("PodGroup has no minResources")
	} else if gpus := (*pg.Spec.MinResources)[GPUResource]; gpus.Value() != 8 {
		t.Errorf("PodGroup minResources %v, want 8 GPUs", *pg.Spec.MinResources)
	}
	if owner := metav1.GetControllerOf(&pg); owner == nil || owner.Kind != "RayCluster" || owner.Name != "gang" || owner.APIVersion != "ray.io/v1" {
		t.Errorf("PodGroup controller %+v, want RayCluster gang (ray.io/v1)", owner)
	}
	if err := poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: pgName}, &pg)
		return err == nil && pg.Status.Phase == schedulingv1beta1.PodGroupRunning, err
	}); err != nil {
		t.Errorf("PodGroup phase %q, want Running: %v", pg.Status.Phase, err)
	}

	// The pods: each names the gang and carries KubeRay's labels.
	groups := map[string]int{}
	for i := range pods {
		p := &pods[i]
		if got := p.Annotations[schedulingv1beta1.KubeGroupNameAnnotationKey]; got != pgName {
			t.Errorf("pod %s: annotation %s = %q, want %q", p.Name, schedulingv1beta1.KubeGroupNameAnnotationKey, got, pgName)
		}
		if p.Spec.SchedulerName != "volcano" {
			t.Errorf("pod %s: schedulerName %q, want volcano", p.Name, p.Spec.SchedulerName)
		}
		if owner := metav1.GetControllerOf(p); owner == nil || owner.Kind != "RayCluster" || owner.Name != "gang" {
			t.Errorf("pod %s: controller %+v, want RayCluster gang", p.Name, owner)
		}
		groups[p.Labels["ray.io/node-type"]+"/"+p.Labels["ray.io/group"]]++
	}
	if groups["head/headgroup"] != 1 || groups["worker/gpu"] != 2 {
		t.Errorf("pods by ray.io/node-type/ray.io/group: %v, want head/headgroup: 1, worker/gpu: 2", groups)
	}
	logObjects(t, &pg, pods)

	// ray-operator restarts like the other components, and the restarted
	// operator still reports the cluster ready.
	if err := tb.Restart(ctx, kubeRayComponent); err != nil {
		t.Fatalf("restart ray-operator: %v", err)
	}
	if pid := componentPID(t, tb, kubeRayComponent); pid == operatorPID || processAlive(operatorPID) {
		t.Errorf("ray-operator pid %d after its restart (before: %d, still alive: %v)", pid, operatorPID, processAlive(operatorPID))
	}
	if s := state(); s != "ready" {
		t.Errorf("RayCluster state after the operator's restart: %q, want ready", s)
	}
	if err := tb.WaitReady(ctx); err != nil {
		t.Fatalf("after restarting ray-operator: %v", err)
	}
	if names := ComponentNames(); !slices.Contains(names, kubeRayComponent) {
		t.Errorf("ComponentNames() = %v, want ray-operator among them", names)
	}
}

// logObjects writes the PodGroup's and the pods' metadata (and the pods'
// scheduling fields) to the test log, to be read with -v.
func logObjects(t *testing.T, pg *schedulingv1beta1.PodGroup, pods []corev1.Pod) {
	t.Helper()
	pgCopy := pg.DeepCopy()
	pgCopy.ManagedFields = nil
	out, err := yaml.Marshal(map[string]any{"metadata": pgCopy.ObjectMeta, "spec": pgCopy.Spec, "status": map[string]any{"phase": pgCopy.Status.Phase}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("PodGroup %s:\n%s", pg.Name, out)
	for i := range pods {
		p := pods[i].DeepCopy()
		p.ManagedFields = nil
		out, err := yaml.Marshal(map[string]any{
			"metadata": p.ObjectMeta,
			"spec":     map[string]any{"schedulerName": p.Spec.SchedulerName, "nodeName": p.Spec.NodeName},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("pod %s:\n%s", p.Name, out)
	}
}

// TestKubeRayIsOptIn checks, without a cluster, that ray-operator is a
// component only of testbeds started with KubeRay, and that status, restart
// and down, run without the option, go by what up recorded.
func TestKubeRayIsOptIn(t *testing.T) {
	cache := t.TempDir()
	plain, err := New(Options{Name: "plain", CacheDir: cache})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(plain.components(), kubeRayComponent) {
		t.Errorf("a testbed without KubeRay has components %v", plain.components())
	}
	err = plain.Restart(t.Context(), kubeRayComponent)
	if err == nil || !strings.Contains(err.Error(), "runs no ray-operator") {
		t.Errorf("restart ray-operator of a testbed without it: %v, want a runs-no-ray-operator error", err)
	}
	if _, err := New(Options{Name: "bad", CacheDir: cache, KubeRayReconcileConcurrency: -1}); err == nil {
		t.Error("a negative reconcile concurrency was accepted")
	}

	// Up recorded KubeRay: a Testbed made without the option sees it.
	withRay, err := New(Options{Name: "with-ray", CacheDir: cache})
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFeatures(withRay.stateDir(), featureSet{KubeRay: true}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(withRay.components(), kubeRayComponent) {
		t.Errorf("a testbed up with KubeRay has components %v, want ray-operator among them", withRay.components())
	}
	// ...and one asking for KubeRay that was started without it does not.
	if err := writeFeatures(plain.stateDir(), featureSet{}); err != nil {
		t.Fatal(err)
	}
	asked, err := New(Options{Name: "plain", CacheDir: cache, KubeRay: true})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(asked.components(), kubeRayComponent) {
		t.Errorf("a testbed started without KubeRay has components %v", asked.components())
	}
}
