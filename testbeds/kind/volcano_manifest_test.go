package kind

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpulab/gpulab/testbeds/binaries"
)

// TestVolcanoManifestFollowsTheVersion renders each Volcano version's own
// development manifest as Install applies it: the scheduler and controllers
// on the local images of that version, without the admission webhook, and
// the version's scheduler configuration kept. It downloads the modules
// (skipped with -short).
func TestVolcanoManifestFollowsTheVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("downloads Volcano's modules; skipped with -short")
	}
	for _, version := range binaries.VolcanoVersions() {
		t.Run(version, func(t *testing.T) {
			cmd := exec.CommandContext(t.Context(), "go", "mod", "download", "-json", "volcano.sh/volcano@"+binaries.VolcanoModuleVersion(version))
			cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
			cmd.Dir = t.TempDir()
			out, err := cmd.Output()
			var info struct{ Dir, Error string }
			_ = json.Unmarshal(out, &info)
			if err != nil || info.Dir == "" {
				t.Fatalf("go mod download volcano.sh/volcano@%s: %v %s", version, err, info.Error)
			}
			manifest, err := volcanoManifest(filepath.Join(info.Dir, "installer", "volcano-development.yaml"), version)
			if err != nil {
				t.Fatal(err)
			}
			text := string(manifest)
			for _, want := range []string{
				"image: " + VolcanoSchedulerImage(version),
				"image: " + VolcanoControllerImage(version),
				"imagePullPolicy: Never",
				"name: volcano-scheduler-configmap",
				"kind: CustomResourceDefinition",
			} {
				if !strings.Contains(text, want) {
					t.Errorf("Volcano %s manifest lacks %q", version, want)
				}
			}
			for _, unwanted := range []string{"name: volcano-admission", "WebhookConfiguration", "image: docker.io/volcanosh/"} {
				if strings.Contains(text, unwanted) {
					t.Errorf("Volcano %s manifest still has %q", version, unwanted)
				}
			}
		})
	}
	if got := VolcanoSchedulerImage("v1.10.0"); got != "gpulab-volcano/vc-scheduler:v1.10.0" {
		t.Errorf("VolcanoSchedulerImage(v1.10.0) = %q", got)
	}
	// A tag cannot hold semver's "+": a rebuild's is made of its name.
	if got := VolcanoControllerImage("v1.14.1+k8s.1.34.4"); got != "gpulab-volcano/vc-controller-manager:v1.14.1_k8s.1.34.4" {
		t.Errorf("VolcanoControllerImage(v1.14.1+k8s.1.34.4) = %q", got)
	}
}

// TestNewResolvesTheVolcanoVersion: the kind testbed takes the version from
// Options or the environment, and refuses one the testbed cannot build.
func TestNewResolvesTheVolcanoVersion(t *testing.T) {
	t.Setenv(binaries.VolcanoVersionEnv, "")
	for in, want := range map[string]string{"": binaries.DefaultVolcanoVersion, "v1.10.0": "v1.10.0"} {
		c, err := New(t.Context(), Options{CacheDir: t.TempDir(), VolcanoVersion: in})
		if err != nil || c.VolcanoVersion() != want {
			t.Errorf("New with VolcanoVersion %q: %v, %v; want %s", in, c, err, want)
		}
	}
	t.Setenv(binaries.VolcanoVersionEnv, "v1.10.0")
	if c, err := New(t.Context(), Options{CacheDir: t.TempDir()}); err != nil || c.VolcanoVersion() != "v1.10.0" {
		t.Errorf("New with $%s=v1.10.0: %v; want v1.10.0", binaries.VolcanoVersionEnv, err)
	}
	if _, err := New(t.Context(), Options{CacheDir: t.TempDir(), VolcanoVersion: "v1.15.1"}); !errors.Is(err, binaries.ErrUnknownVersion) {
		t.Errorf("New with Volcano v1.15.1: %v, want ErrUnknownVersion", err)
	}
}
