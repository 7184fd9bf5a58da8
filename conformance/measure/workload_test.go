package measure

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
	batchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// The fixtures are real objects the local testbed made: a Volcano Job of a
// head and 2 x 4-GPU workers, and a RayCluster of the same shape, each
// with its PodGroup and one worker pod.
func fixture[T any](t *testing.T, name string) *T {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "workloads", name))
	if err != nil {
		t.Fatal(err)
	}
	obj := new(T)
	if err := yaml.Unmarshal(b, obj); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return obj
}

func TestWorkloadsMapRealObjects(t *testing.T) {
	for _, tc := range []struct {
		name        string
		workload    Workload
		object      client.Object
		pod         *corev1.Pod
		podGroup    *schedulingv1beta1.PodGroup
		gang, slot  string
		wantDesired int
		wantReady   bool
	}{
		{
			name: "vcjob", workload: VolcanoJobs{},
			object: fixture[batchv1alpha1.Job](t, "vcjob.yaml"), pod: fixture[corev1.Pod](t, "vcjob-pod.yaml"),
			podGroup: fixture[schedulingv1beta1.PodGroup](t, "vcjob-podgroup.yaml"),
			gang:     "train", slot: "train/workers/1", wantDesired: 3, wantReady: true,
		},
		{
			name: "raycluster", workload: RayClusters{},
			object: fixture[unstructured.Unstructured](t, "raycluster.yaml"), pod: fixture[corev1.Pod](t, "raycluster-pod.yaml"),
			podGroup: fixture[schedulingv1beta1.PodGroup](t, "raycluster-podgroup.yaml"),
			gang:     "raygang", wantDesired: 3, wantReady: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind := tc.workload.Kind()
			if g := gangOf(tc.pod, kind); g != tc.gang {
				t.Errorf("pod %s is in gang %q, want %q", tc.pod.Name, g, tc.gang)
			}
			if g := gangOf(tc.podGroup, kind); g != tc.gang {
				t.Errorf("PodGroup %s is of gang %q, want %q", tc.podGroup.Name, g, tc.gang)
			}
			// The pod names its PodGroup, as the pods-before-PodGroup detector needs.
			if a := tc.pod.Annotations[schedulingv1beta1.KubeGroupNameAnnotationKey]; a != tc.podGroup.Name {
				t.Errorf("pod names PodGroup %q, want %q", a, tc.podGroup.Name)
			}
			want := tc.slot
			if want == "" {
				want = tc.gang + "/" + tc.pod.Name
			}
			if s := tc.workload.Slot(tc.gang, tc.pod); s != want {
				t.Errorf("slot %q, want %q", s, want)
			}
			st := tc.workload.Read(tc.object)
			if st.Desired != tc.wantDesired || st.Ready != tc.wantReady || st.Claim {
				t.Errorf("read %+v, want %d desired, ready %v, no claim judged", st, tc.wantDesired, tc.wantReady)
			}
			if tc.workload.Read(&corev1.Pod{}) != (WorkloadState{}) {
				t.Error("a foreign object reads as a workload")
			}
		})
	}
}

// A pod of another kind of workload in the namespace (here a Volcano Job's,
// seen while following GPUClusters) belongs to no gang.
func TestGangOfNeedsTheWorkloadKind(t *testing.T) {
	pod := fixture[corev1.Pod](t, "vcjob-pod.yaml")
	if g := gangOf(pod, GPUClusters{}.Kind()); g != "" {
		t.Errorf("a Volcano Job's pod mapped to GPUCluster %q", g)
	}
	if g := gangOf(pod, RayClusters{}.Kind()); g != "" {
		t.Errorf("a Volcano Job's pod mapped to RayCluster %q", g)
	}
}

// A Volcano Job is Ready when Running, not merely Pending or Inqueue.
func TestVolcanoJobReadyIsRunning(t *testing.T) {
	j := fixture[batchv1alpha1.Job](t, "vcjob.yaml")
	j.Status.State.Phase = batchv1alpha1.Pending
	if (VolcanoJobs{}).Read(j).Ready {
		t.Error("a Pending job reads as Ready")
	}
	u := fixture[unstructured.Unstructured](t, "raycluster.yaml")
	if err := unstructured.SetNestedField(u.Object, "suspended", "status", "state"); err != nil {
		t.Fatal(err)
	}
	if (RayClusters{}).Read(u).Ready {
		t.Error("a suspended RayCluster reads as Ready")
	}
}
