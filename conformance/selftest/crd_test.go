package selftest

import (
	"fmt"
	"os"
	"path/filepath"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// permissiveGPUClusterCRDs copies gpulab's CRDs from dir into out, with
// the GPUCluster's schema replaced by one that accepts anything: a cluster
// where validation does not hold, so a check that expects a rejection
// creates objects instead.
func permissiveGPUClusterCRDs(dir, out string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return "", err
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		if filepath.Base(f) == "gpulab.io_gpuclusters.yaml" {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := yaml.Unmarshal(data, &crd); err != nil {
				return "", fmt.Errorf("%s: %w", f, err)
			}
			anything := true
			for i := range crd.Spec.Versions {
				crd.Spec.Versions[i].Schema = &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &anything}}
			}
			if data, err = yaml.Marshal(&crd); err != nil {
				return "", err
			}
		}
		if err := os.WriteFile(filepath.Join(out, filepath.Base(f)), data, 0o644); err != nil {
			return "", err
		}
	}
	return out, nil
}
