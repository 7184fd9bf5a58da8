package kind

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

// TestKindManifestsApply renders the kind overlays and applies them to a
// real API server: what the kind profile installs must be accepted, use the
// locally loaded images and run the agent on mock GPUs as the kubelet's
// device plugin (no node-status patching) or as a DRA driver.
func TestKindManifestsApply(t *testing.T) {
	env := envtest.StartForTest(t, envtest.Options{CRDDirs: []string{filepath.Join("..", "..", "operator", "config", "crd", "bases")}})
	bins, err := binaries.Lookup(context.Background(), binaries.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The last of a repeated flag wins: the namespace each side uses.
	lastFlag := map[string]string{}
	for _, overlay := range []string{"operator", "agent", "agent/dra"} {
		out, err := exec.Command(bins.Kubectl, "kustomize", overlay).Output()
		if err != nil {
			t.Fatalf("kustomize %s: %v", overlay, err)
		}
		text := string(out)
		for _, flag := range []string{"--agent-lease-namespace=", "--lease-namespace="} {
			if i := strings.LastIndex(text, " "+flag); i >= 0 {
				lastFlag[flag], _, _ = strings.Cut(text[i+1+len(flag):], "\n")
			}
		}
		if overlay != "operator" && strings.Contains(text, "--advertise-capacity") {
			t.Errorf("the %s overlay patches node capacity; on kind the kubelet advertises it (device plugin) or claims need none (DRA)", overlay)
		}
		if overlay == "agent/dra" && strings.Contains(text, "--device-plugin") {
			t.Error("the DRA overlay also runs the device plugin: each GPU would be handed out twice")
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
		for {
			obj := &unstructured.Unstructured{}
			if err := dec.Decode(&obj.Object); err != nil {
				break
			}
			if len(obj.Object) == 0 {
				continue
			}
			if err := env.Client.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("test"), client.ForceOwnership); err != nil {
				t.Errorf("%s: applying %s %s: %v", overlay, obj.GetKind(), obj.GetName(), err)
			}
		}
		for _, want := range map[string][]string{
			"operator": {"image: gpulab-operator:dev", "imagePullPolicy: Never"},
			"agent": {"image: gpulab-agent:dev", "imagePullPolicy: Never", "--nvml=mock:dgx-h100", "--device-plugin",
				"namespace: gpulab-agent", "path: /var/lib/kubelet/device-plugins", "--cdi-spec-dir=/var/run/cdi"},
			"agent/dra": {"image: gpulab-agent:dev", "imagePullPolicy: Never", "--nvml=mock:dgx-h100", "--dra-driver=gpu.gpulab.io",
				"namespace: gpulab-agent", "path: /var/lib/kubelet/plugins_registry", "--cdi-spec-dir=/var/run/cdi", "kind: DeviceClass"},
		}[overlay] {
			if !strings.Contains(text, want) {
				t.Errorf("%s overlay lacks %q", overlay, want)
			}
		}
	}
	// The operator reads the heartbeat Leases where the agents renew them.
	if op, ag := lastFlag["--agent-lease-namespace="], lastFlag["--lease-namespace="]; op == "" || op != ag {
		t.Errorf("the operator reads heartbeat Leases in %q, the agents renew them in %q", op, ag)
	}
}
