package scheduler

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	schedulingv1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/gpulab/gpulab/internal/gang"
	"github.com/gpulab/gpulab/internal/gang/gangtest"
)

// TestVolcanoEnsureWritesTheBuildersPodGroup: the PodGroup the operator
// creates is the gang builder's (the one conformance/bare creates for the
// same spec), controlled by the cluster; a resized gang updates it in
// place and an unchanged one writes nothing.
func TestVolcanoEnsureWritesTheBuildersPodGroup(t *testing.T) {
	ctx := context.Background()
	s := testScheme(t)
	if err := schedulingv1beta1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).Build()
	cluster := gangtest.Cluster()
	want := gang.VolcanoPodGroup(cluster, gangtest.Want().Size)

	st, changed, err := Volcano{}.Ensure(ctx, c, cluster, gangtest.Want().Size)
	if err != nil || !changed {
		t.Fatalf("Ensure = %v, %v; want created", changed, err)
	}
	pg := &schedulingv1beta1.PodGroup{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(want), pg); err != nil {
		t.Fatalf("reading the PodGroup: %v", err)
	}
	if !equality.Semantic.DeepEqual(pg.Spec, want.Spec) || !equality.Semantic.DeepEqual(pg.Labels, want.Labels) {
		t.Errorf("PodGroup spec %+v labels %v, want the builder's %+v %v", pg.Spec, pg.Labels, want.Spec, want.Labels)
	}
	if !metav1.IsControlledBy(pg, cluster) {
		t.Errorf("PodGroup owners %v, want the cluster", pg.OwnerReferences)
	}
	if st.Name != "train-pg" || st.MinMember != 5 || st.APIVersion != "scheduling.volcano.sh/v1beta1" || st.MinTaskMember["workers"] != 3 {
		t.Errorf("status %+v", st)
	}
	if _, changed, err := (Volcano{}).Ensure(ctx, c, cluster, gangtest.Want().Size); err != nil || changed {
		t.Errorf("Ensure of an unchanged gang = %v, %v; want no write", changed, err)
	}

	cluster.Spec.WorkerGroups[0].Replicas = 5
	resized := gang.Build(cluster, gang.Groups(cluster), gangtest.Overheads()).Size
	if _, changed, err := (Volcano{}).Ensure(ctx, c, cluster, resized); err != nil || !changed {
		t.Fatalf("Ensure after a resize = %v, %v; want updated", changed, err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(want), pg); err != nil {
		t.Fatal(err)
	}
	if pg.Spec.MinMember != 7 || pg.Spec.MinTaskMember["workers"] != 5 {
		t.Errorf("resized PodGroup %+v, want minMember 7 with 5 workers", pg.Spec)
	}
}
