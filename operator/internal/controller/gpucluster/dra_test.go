package gpucluster_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	gpulabv1alpha1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/internal/gfd"
	"github.com/gpulab/gpulab/operator/internal/testutil"
)

// TestDRAGroups: a worker group whose GPUs come through DRA gets a
// ResourceClaimTemplate the cluster controls (exactly perPod devices of
// its class, its selectors) before any pod; each pod claims from it
// instead of requesting nvidia.com/gpu; the Volcano PodGroup's
// minResources has no GPUs and GangPolicyComplete says so. A template of
// that name controlled by another object is left alone: NameConflict.
func TestDRAGroups(t *testing.T) {
	c := needEnv(t)
	ctx := context.Background()
	ns := testutil.NewNamespace(t, c)
	publishDevices(t, c, "gpu.gpulab.io", map[string]int{"h100-0": 8, "h100-1": 8})
	testutil.StartManager(t, env.Config, testutil.ManagerOptions{})

	gc := testutil.NewCluster(ns, "claims", 2, 4)
	gc.Spec.WorkerGroups[0].GPUs.DeviceClassName = "gpu.gpulab.io"
	gc.Spec.WorkerGroups[0].GPUs.Selectors = []string{`device.attributes["gpu.gpulab.io"].architecture == "Hopper"`}
	if err := c.Create(ctx, gc); err != nil {
		t.Fatal(err)
	}
	group := gc.Spec.WorkerGroups[0].Name
	name := gpulabv1alpha1.GPUClaimTemplateName("claims", group)
	var pods []corev1.Pod
	testutil.Eventually(t, waitTimeout, "the group's pods", func() (bool, string) {
		pods = testutil.ListPods(t, c, ns)
		return len(pods) == 3, fmt.Sprintf("%d pods", len(pods))
	})
	tmpl := &resourceapi.ResourceClaimTemplate{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, tmpl); err != nil {
		t.Fatalf("no ResourceClaimTemplate %s: %v", name, err)
	}
	cur := testutil.GetCluster(t, c, ns, "claims")
	if !metav1.IsControlledBy(tmpl, cur) {
		t.Errorf("template owners %v", tmpl.OwnerReferences)
	}
	if !tmpl.CreationTimestamp.Before(&pods[0].CreationTimestamp) && !tmpl.CreationTimestamp.Equal(&pods[0].CreationTimestamp) {
		t.Errorf("template created at %s, after a pod at %s", tmpl.CreationTimestamp, pods[0].CreationTimestamp)
	}
	reqs := tmpl.Spec.Spec.Devices.Requests
	if len(reqs) != 1 || reqs[0].Exactly == nil || reqs[0].Exactly.DeviceClassName != "gpu.gpulab.io" || reqs[0].Exactly.Count != 4 ||
		reqs[0].Exactly.AllocationMode != resourceapi.DeviceAllocationModeExactCount || len(reqs[0].Exactly.Selectors) != 1 {
		t.Errorf("template requests %+v", reqs)
	}
	for _, p := range pods {
		if p.Labels[gpulabv1alpha1.GroupLabel] != group {
			continue
		}
		if len(p.Spec.ResourceClaims) != 1 || p.Spec.ResourceClaims[0].ResourceClaimTemplateName == nil || *p.Spec.ResourceClaims[0].ResourceClaimTemplateName != name {
			t.Errorf("%s: resource claims %+v", p.Name, p.Spec.ResourceClaims)
		}
		ctr := p.Spec.Containers[0]
		if _, ok := ctr.Resources.Limits[gfd.GPUResource]; ok || len(ctr.Resources.Claims) != 1 {
			t.Errorf("%s: limits %v, claims %v: want the claim and no nvidia.com/gpu", p.Name, ctr.Resources.Limits, ctr.Resources.Claims)
		}
	}
	testutil.Eventually(t, waitTimeout, "GangPolicyComplete to name the claimed GPUs", func() (bool, string) {
		cond := meta.FindStatusCondition(testutil.GetCluster(t, c, ns, "claims").Status.Conditions, gpulabv1alpha1.ConditionGangPolicyComplete)
		ok := cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == gpulabv1alpha1.ReasonGangPolicyPartial &&
			strings.Contains(cond.Message, group+": 4 of gpu.gpulab.io per pod")
		return ok, conditionString(cond)
	})
	pg := &schedulingv1beta1.PodGroup{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: gpulabv1alpha1.PodGroupName("claims")}, pg); err != nil {
		t.Fatal(err)
	}
	if q, ok := pg.Spec.MinResources.Name(gfd.GPUResource, "0").AsInt64(); ok && q != 0 {
		t.Errorf("PodGroup minResources counts %d nvidia.com/gpu for claimed GPUs", q)
	}

	// Someone else's template under the name a second cluster wants.
	theirs := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: gpulabv1alpha1.GPUClaimTemplateName("blocked", group),
		OwnerReferences: foreignOwner(t, c, ns, "holder")}, Spec: tmpl.Spec}
	if err := c.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	blocked := testutil.NewCluster(ns, "blocked", 2, 4)
	blocked.Spec.WorkerGroups[0].GPUs.DeviceClassName = "gpu.gpulab.io"
	if err := c.Create(ctx, blocked); err != nil {
		t.Fatal(err)
	}
	waitReadyReason(t, c, ns, "blocked", gpulabv1alpha1.ReasonNameConflict, "ResourceClaimTemplate "+theirs.Name, "ConfigMap holder")
	expectUntouched(t, c, theirs)
}

// publishDevices creates DeviceClass class (every device of the driver of
// that name, as the agent's is) and a ResourceSlice of that driver with n
// devices for each node, removed when the test ends.
func publishDevices(t *testing.T, c client.Client, class string, nodes map[string]int) {
	t.Helper()
	ctx := context.Background()
	dc := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", class)}}},
	}}
	if err := c.Create(ctx, dc); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), dc) })
	for node, n := range nodes {
		slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-" + class}, Spec: resourceapi.ResourceSliceSpec{
			Driver: class, NodeName: &node, Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
		}}
		for i := range n {
			slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("gpu-%d", i)})
		}
		if err := c.Create(ctx, slice); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), slice) })
	}
}

// TestDRACapacityFromSlices: a group that claims its GPUs is sized and
// checked against its DeviceClass's devices in the ResourceSlices, not the
// nodes' nvidia.com/gpu: with none published it is Unschedulable (naming
// the class) and gets no pod; once a driver publishes enough, the slice
// watch wakes it and it gets its pods.
func TestDRACapacityFromSlices(t *testing.T) {
	c := needEnv(t)
	ctx := context.Background()
	ns := testutil.NewNamespace(t, c)
	const class = "gpu.example.com"
	testutil.StartManager(t, env.Config, testutil.ManagerOptions{})

	gc := testutil.NewCluster(ns, "sliced", 2, 3)
	gc.Spec.WorkerGroups[0].GPUs.DeviceClassName = class
	if err := c.Create(ctx, gc); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, waitTimeout, "Unschedulable with no devices of the class", func() (bool, string) {
		cond := schedulable(t, c, ns, "sliced")
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == gpulabv1alpha1.ReasonNoMatchingNodes &&
			strings.Contains(cond.Message, "devices of DeviceClass "+class), conditionString(cond)
	})
	if n := len(testutil.ListPods(t, c, ns)); n != 0 {
		t.Errorf("an Unschedulable cluster has %d pods", n)
	}
	// One node with 4: two pods of 3 do not fit on it.
	publishDevices(t, c, class, map[string]int{"h100-0": 4})
	testutil.Eventually(t, waitTimeout, "InsufficientGPUs with one node of 4 devices", func() (bool, string) {
		cond := schedulable(t, c, ns, "sliced")
		return cond != nil && cond.Reason == gpulabv1alpha1.ReasonInsufficientGPUs &&
			strings.Contains(cond.Message, "group workers needs 2 nodes with ≥3 healthy devices of DeviceClass "+class+"; 1 exist"), conditionString(cond)
	})
	publishDevices(t, c, class, map[string]int{"h100-1": 4})
	testutil.Eventually(t, waitTimeout, "Schedulable with pods once a second node publishes", func() (bool, string) {
		cond := schedulable(t, c, ns, "sliced")
		n := len(testutil.ListPods(t, c, ns))
		return cond != nil && cond.Status == metav1.ConditionTrue && n == 3, fmt.Sprintf("%s, %d pods", conditionString(cond), n)
	})
}
