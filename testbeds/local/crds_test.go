package local

import (
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// laggingMapper answers "no match" until discovery has caught up, as the
// API server's discovery can for a CRD Established a moment ago.
type laggingMapper struct {
	meta.RESTMapper
	caughtUp bool
}

func (m *laggingMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if !m.caughtUp {
		return nil, &meta.NoKindMatchError{GroupKind: gk}
	}
	return m.RESTMapper.RESTMapping(gk, versions...)
}

// TestCRDsServedWaitsForDiscovery: an Established CRD whose kind the
// client cannot map yet is not served (seen under load: "no matches for
// kind KWOKNodeClass" right after installCRDs returned); once discovery
// maps it, it is.
func TestCRDsServedWaitsForDiscovery(t *testing.T) {
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	gv := schema.GroupVersion{Group: "karpenter.kwok.sh", Version: "v1alpha1"}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "kwoknodeclasses.karpenter.kwok.sh"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: gv.Group, Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "KWOKNodeClass", Plural: "kwoknodeclasses"},
			Scope:    apiextensionsv1.ClusterScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: gv.Version, Served: true, Storage: true}},
		},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{Conditions: []apiextensionsv1.CustomResourceDefinitionCondition{
			{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue},
		}},
	}
	known := meta.NewDefaultRESTMapper([]schema.GroupVersion{gv})
	known.Add(gv.WithKind("KWOKNodeClass"), meta.RESTScopeRoot)
	mapper := &laggingMapper{RESTMapper: known}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(crd).WithRESTMapper(mapper).Build()
	names := []string{crd.Name}

	if served, err := crdsServed(t.Context(), c, names); err != nil || served {
		t.Errorf("Established, kind not in discovery yet: served %v, err %v; want not served, no error", served, err)
	}
	mapper.caughtUp = true
	if served, err := crdsServed(t.Context(), c, names); err != nil || !served {
		t.Errorf("Established and in discovery: served %v, err %v; want served", served, err)
	}
}
