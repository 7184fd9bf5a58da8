package ownership

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
)

func TestCheck(t *testing.T) {
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "uid-a"}}
	yes := true
	ref := func(kind, apiVersion, name string, uid types.UID) []metav1.OwnerReference {
		return []metav1.OwnerReference{{Kind: kind, APIVersion: apiVersion, Name: name, UID: uid, Controller: &yes}}
	}
	for _, tc := range []struct {
		name string
		refs []metav1.OwnerReference
		want string // "" means owned
	}{
		{"controlled by owner", ref("GPUCluster", "gpulab.io/v1alpha1", "a", "uid-a"), ""},
		{"same name, other UID (an earlier object of that name)", ref("GPUCluster", "gpulab.io/v1alpha1", "a", "uid-old"), "controlled by GPUCluster.gpulab.io a"},
		{"another controller", ref("RayCluster", "ray.io/v1", "x", "uid-x"), "controlled by RayCluster.ray.io x"},
		{"core kind", ref("ReplicaSet", "apps/v1", "rs", "uid-rs"), "controlled by ReplicaSet.apps rs"},
		{"no controller", nil, "controlled by no controller"},
		{"owner but not controller", []metav1.OwnerReference{{Kind: "GPUCluster", APIVersion: "gpulab.io/v1alpha1", Name: "a", UID: "uid-a"}}, "no controller"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a-w-0", OwnerReferences: tc.refs}}
			err := Check("Pod", pod, owner)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Check = %v, want owned", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "Pod a-w-0") {
				t.Fatalf("Check = %v, want a conflict naming Pod a-w-0 and %q", err, tc.want)
			}
			if !IsConflict(fmt.Errorf("wrapped: %w", err)) {
				t.Errorf("IsConflict(wrapped) = false")
			}
		})
	}
}

// TestPrevious: only a controller of the owner's own kind, group and name
// is its previous incarnation; another kind of the same name is a conflict.
func TestPrevious(t *testing.T) {
	owner := &gpulabv1alpha1.GPUCluster{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "uid-new"}}
	yes := true
	for _, tc := range []struct {
		name             string
		kind, apiVersion string
		refName          string
		want             bool
	}{
		{"previous GPUCluster a", "GPUCluster", "gpulab.io/v1alpha1", "a", true},
		{"RayCluster a", "RayCluster", "ray.io/v1", "a", false},
		{"GPUCluster of another group", "GPUCluster", "example.com/v1", "a", false},
		{"GPUCluster b", "GPUCluster", "gpulab.io/v1alpha1", "b", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a-head", OwnerReferences: []metav1.OwnerReference{
				{Kind: tc.kind, APIVersion: tc.apiVersion, Name: tc.refName, UID: "uid-old", Controller: &yes}}}}
			err := Check("Pod", pod, owner)
			if got := IsReplacing(err); got != tc.want {
				t.Fatalf("IsReplacing(%v) = %v, want %v", err, got, tc.want)
			}
			if !IsConflict(err) {
				t.Fatalf("%v is not a ConflictError", err)
			}
		})
	}
	joined := errors.Join(Check("Pod", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", OwnerReferences: []metav1.OwnerReference{
		{Kind: "GPUCluster", APIVersion: "gpulab.io/v1alpha1", Name: "a", UID: "uid-old", Controller: &yes}}}}, owner),
		Check("Service", &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, owner))
	if IsReplacing(joined) {
		t.Errorf("a replacement joined with a real conflict is not only a replacement: %v", joined)
	}
}
