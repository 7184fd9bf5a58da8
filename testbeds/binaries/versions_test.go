package binaries

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"

	"github.com/gpulab/gpulab/internal/repo"
)

// TestResolveVersions: an empty version is the environment's, else the
// default; a version the testbed does not build is refused with the ones it
// does, and one that was tried says why it does not build.
func TestResolveVersions(t *testing.T) {
	t.Setenv(VolcanoVersionEnv, "")
	t.Setenv(KubeRayVersionEnv, "")
	for _, tc := range []struct {
		resolve func(string) (string, error)
		in, env string
		want    string
	}{
		{ResolveVolcanoVersion, "", "", DefaultVolcanoVersion},
		{ResolveVolcanoVersion, "v1.10.0", "", "v1.10.0"},
		{ResolveVolcanoVersion, "", "v1.10.0", "v1.10.0"},
		{ResolveVolcanoVersion, "v1.14.1", "v1.10.0", "v1.14.1"},
		{ResolveVolcanoVersion, "", DefaultDRAVolcanoVersion, DefaultDRAVolcanoVersion},
		{ResolveKubeRayVersion, "", "", DefaultKubeRayVersion},
		{ResolveKubeRayVersion, "", "v1.5.0", "v1.5.0"},
		{ResolveKubeRayVersion, "v1.6.2", "v1.5.0", "v1.6.2"},
	} {
		t.Setenv(VolcanoVersionEnv, tc.env)
		t.Setenv(KubeRayVersionEnv, tc.env)
		if got, err := tc.resolve(tc.in); err != nil || got != tc.want {
			t.Errorf("resolving %q ($%s=%q) = %q, %v; want %q", tc.in, VolcanoVersionEnv, tc.env, got, err, tc.want)
		}
	}
	t.Setenv(VolcanoVersionEnv, "")
	t.Setenv(KubeRayVersionEnv, "")

	for _, tc := range []struct {
		resolve  func(string) (string, error)
		in, env  string
		contains []string
	}{
		{ResolveVolcanoVersion, "v1.9.0", "", []string{`Volcano "v1.9.0"`, "v1.10.0, v1.14.1, v1.14.1+k8s.1.34.4"}},
		{ResolveVolcanoVersion, "v1.14.1+k8s.1.34.5", "", []string{`"v1.14.1+k8s.1.34.5"`}},
		{ResolveVolcanoVersion, "1.14.1", "", []string{`"1.14.1"`}},
		{ResolveVolcanoVersion, "v1.15.1", "", []string{"volcano.sh/apis v1.15.x", "undefined: schedulingv1beta1.QueueAllocationGateKey"}},
		{ResolveVolcanoVersion, "", "v1.11.0", []string{"$" + VolcanoVersionEnv}},
		{ResolveKubeRayVersion, "v1.7.0", "", []string{`KubeRay "v1.7.0"`, "v1.5.0, v1.6.2", "refuses its zip"}},
	} {
		t.Setenv(VolcanoVersionEnv, tc.env)
		got, err := tc.resolve(tc.in)
		if !errors.Is(err, ErrUnknownVersion) {
			t.Errorf("resolving %q ($%s=%q) = %q, %v; want ErrUnknownVersion", tc.in, VolcanoVersionEnv, tc.env, got, err)
			continue
		}
		for _, want := range tc.contains {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("resolving %q: error %q lacks %q", tc.in, err, want)
			}
		}
	}
}

// TestDefaultsAreBuilt: the defaults are among the versions built, which
// are listed oldest first.
func TestDefaultsAreBuilt(t *testing.T) {
	want := []string{"v1.10.0", "v1.14.1", "v1.14.1+k8s.1.34.4"}
	if v := VolcanoVersions(); !slices.Contains(v, DefaultVolcanoVersion) || !slices.Contains(v, DefaultDRAVolcanoVersion) || !slices.Equal(v, want) {
		t.Errorf("VolcanoVersions() = %v, want %v with the defaults %s and %s", v, want, DefaultVolcanoVersion, DefaultDRAVolcanoVersion)
	}
	for _, v := range VolcanoVersions() {
		if _, ok := volcanoReleases[VolcanoModuleVersion(v)]; !ok {
			t.Errorf("Volcano %s rebuilds %s, which is not built as released", v, VolcanoModuleVersion(v))
		}
		if _, err := volcanoKubernetes(v); err != nil {
			t.Error(err)
		}
	}
	if v := KubeRayVersions(); !slices.Contains(v, DefaultKubeRayVersion) || !slices.Equal(v, []string{"v1.5.0", "v1.6.2"}) {
		t.Errorf("KubeRayVersions() = %v, want v1.5.0 and v1.6.2 with the default %s", v, DefaultKubeRayVersion)
	}
	for v := range volcanoUnbuildable {
		if _, ok := volcanoReleases[v]; ok {
			t.Errorf("Volcano %s is both built and said not to build", v)
		}
	}
	for v := range kuberayUnbuildable {
		if _, ok := kuberayReleases[v]; ok {
			t.Errorf("KubeRay %s is both built and said not to build", v)
		}
	}
}

// TestUnknownVersionIsRejectedEarly: Ensure, EnsureKubeRay and Lookup
// refuse a version they cannot build before they touch the cache.
func TestUnknownVersionIsRejectedEarly(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "cache")
	for name, call := range map[string]func() error{
		"Ensure": func() error {
			_, err := Ensure(t.Context(), Options{CacheDir: cache, VolcanoVersion: "v1.15.1"})
			return err
		},
		"EnsureKubeRay": func() error {
			_, err := EnsureKubeRay(t.Context(), Options{CacheDir: cache, KubeRayVersion: "v1.7.0"})
			return err
		},
		"Lookup": func() error {
			_, err := Lookup(t.Context(), Options{CacheDir: cache, VolcanoVersion: "latest"})
			return err
		},
	} {
		if err := call(); !errors.Is(err, ErrUnknownVersion) {
			t.Errorf("%s: %v, want ErrUnknownVersion", name, err)
		}
	}
	if _, err := os.Stat(cache); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the cache was touched (%v); an unknown version must fail first", err)
	}
}

// TestCacheIsKeyedByVersion: each version has its own binaries and build
// module, so versions coexist in one cache, and Lookup of a version that is
// not built names it.
func TestCacheIsKeyedByVersion(t *testing.T) {
	cache := t.TempDir()
	builders := map[string]*builder{}
	for _, v := range VolcanoVersions() {
		opts, err := Options{CacheDir: cache, VolcanoVersion: v, KubeRayVersion: "v1.5.0"}.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		builders[v] = &builder{opts: opts}
	}
	old, cur := builders["v1.10.0"], builders["v1.14.1"]
	if got, want := old.volcano().dir(cache), filepath.Join(cache, "bin", "volcano-v1.10.0"); got != want {
		t.Errorf("v1.10.0 binaries in %s, want %s", got, want)
	}
	if got, want := cur.path(cur.volcano(), "vc-scheduler"), filepath.Join(cache, "bin", "volcano-v1.14.1", "vc-scheduler"); got != want {
		t.Errorf("v1.14.1 scheduler at %s, want %s", got, want)
	}
	if got, want := old.kuberay().dir(cache), filepath.Join(cache, "bin", "kuberay-v1.5.0"); got != want {
		t.Errorf("KubeRay v1.5.0 in %s, want %s", got, want)
	}
	src, err := cur.srcDir("volcano", cur.opts.VolcanoVersion)
	if err != nil || src != filepath.Join(cache, "src", "volcano-v1.14.1") {
		t.Errorf("v1.14.1 build module in %s (%v), want src/volcano-v1.14.1", src, err)
	}
	// A rebuild on other libraries neither reuses nor overwrites the
	// release's binaries or build module.
	rebuild := builders[DefaultDRAVolcanoVersion]
	if got, want := rebuild.volcano().dir(cache), filepath.Join(cache, "bin", "volcano-"+DefaultDRAVolcanoVersion); got != want {
		t.Errorf("%s binaries in %s, want %s", DefaultDRAVolcanoVersion, got, want)
	}
	if src, err := rebuild.srcDir("volcano", rebuild.opts.VolcanoVersion); err != nil || src != filepath.Join(cache, "src", "volcano-"+DefaultDRAVolcanoVersion) {
		t.Errorf("%s build module in %s (%v), want its own", DefaultDRAVolcanoVersion, src, err)
	}

	// Only v1.10.0 is "built": every base component of its set is there.
	for _, c := range old.components() {
		for _, bin := range c.binaries {
			path := old.path(c, bin)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, nil, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range old.components() {
		if !old.built(c) {
			t.Errorf("%s %s not found after it was built", c.name, c.version)
		}
	}
	if cur.built(cur.volcano()) {
		t.Error("Volcano v1.14.1 counts as built when only v1.10.0 is")
	}
	_, err = Lookup(t.Context(), Options{CacheDir: cache, VolcanoVersion: "v1.14.1"})
	if err == nil || !strings.Contains(err.Error(), "volcano v1.14.1 is not built") {
		t.Errorf("Lookup of v1.14.1 with only v1.10.0 built: %v, want it to name volcano v1.14.1", err)
	}
}

// v114GoMod is the shape of Volcano v1.14's go.mod: a require of the apis
// at v0.0.0 and a replace of them by a folder the module zip omits.
const v114GoMod = `module volcano.sh/volcano

go 1.24.0

require (
	k8s.io/api v0.34.1
	volcano.sh/apis v0.0.0
)

replace (
	k8s.io/api => k8s.io/api v0.34.1
	google.golang.org/grpc => google.golang.org/grpc v1.64.0
	volcano.sh/apis => ./staging/src/volcano.sh/apis
)
`

// TestDependentGoModRepeatsReplaces: the throwaway module repeats
// upstream's replaces, takes the release's version for an overridden one,
// and refuses a replace by a folder it cannot have.
func TestDependentGoModRepeatsReplaces(t *testing.T) {
	out, err := dependentGoModFrom("volcano", "volcano.sh/volcano", "v1.14.1", "go.mod", []byte(v114GoMod),
		map[string]string{"volcano.sh/apis": volcanoReleases["v1.14.1"].apis})
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.Parse("go.mod", []byte(out), nil)
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if f.Module.Mod.Path != "gpulab.local/build/volcano" || len(f.Require) != 1 || f.Require[0].Mod.String() != "volcano.sh/volcano@v1.14.1" {
		t.Errorf("module %s requiring %v, want gpulab.local/build/volcano requiring volcano.sh/volcano@v1.14.1:\n%s", f.Module.Mod.Path, f.Require, out)
	}
	replaces := map[string]string{}
	for _, r := range f.Replace {
		replaces[r.Old.String()] = r.New.String()
	}
	want := map[string]string{
		"k8s.io/api":             "k8s.io/api@v0.34.1",
		"google.golang.org/grpc": "google.golang.org/grpc@v1.64.0",
		"volcano.sh/apis":        "volcano.sh/apis@v1.14.0",
	}
	if len(replaces) != len(want) {
		t.Errorf("replaces %v, want %v", replaces, want)
	}
	for old, repl := range want {
		if replaces[old] != repl {
			t.Errorf("replace %s => %q, want %q:\n%s", old, replaces[old], repl, out)
		}
	}

	_, err = dependentGoModFrom("volcano", "volcano.sh/volcano", "v1.14.1", "go.mod", []byte(v114GoMod), nil)
	if err == nil || !strings.Contains(err.Error(), "./staging/src/volcano.sh/apis") {
		t.Errorf("a folder replace without an override: %v, want an error naming the folder", err)
	}
}

// TestKubernetesLibraries: a rebuild moves k8s.io/kubernetes and the
// staging modules pinned at its minor to the chosen patch, and leaves every
// other replace as upstream pins it.
func TestKubernetesLibraries(t *testing.T) {
	const goMod = `module volcano.sh/volcano

require k8s.io/kubernetes v1.34.1

replace (
	k8s.io/api => k8s.io/api v0.34.1
	k8s.io/dynamic-resource-allocation => k8s.io/dynamic-resource-allocation v0.34.1
	k8s.io/klog/v2 => k8s.io/klog/v2 v2.130.1
	k8s.io/legacy-cloud-providers => k8s.io/legacy-cloud-providers v0.23.0
	google.golang.org/grpc => google.golang.org/grpc v1.64.0
)
`
	kubernetes, err := volcanoKubernetes(DefaultDRAVolcanoVersion)
	if err != nil {
		t.Fatal(err)
	}
	got, err := kubernetesLibraries("go.mod", []byte(goMod), kubernetes)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"k8s.io/kubernetes":                  "v1.34.4",
		"k8s.io/api":                         "v0.34.4",
		"k8s.io/dynamic-resource-allocation": "v0.34.4",
	}
	if !maps.Equal(got, want) {
		t.Errorf("overrides %v, want %v", got, want)
	}
	out, err := dependentGoModFrom("volcano", "volcano.sh/volcano", "v1.14.1", "go.mod", []byte(goMod), got)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"k8s.io/api => k8s.io/api v0.34.4", "k8s.io/kubernetes => k8s.io/kubernetes v1.34.4",
		"k8s.io/klog/v2 => k8s.io/klog/v2 v2.130.1", "k8s.io/legacy-cloud-providers => k8s.io/legacy-cloud-providers v0.23.0"} {
		if !strings.Contains(out, line) {
			t.Errorf("the build's go.mod lacks %q:\n%s", line, out)
		}
	}

	if got, err := volcanoKubernetes("v1.14.1"); err != nil || got != "" {
		t.Errorf("a release as it is asks for Kubernetes libraries %q, %v; want none", got, err)
	}
	if _, err := volcanoKubernetes("v1.14.1+patched"); err == nil {
		t.Error("a rebuild named v1.14.1+patched: no error")
	}
	if got, err := kubernetesLibraries("go.mod", []byte(goMod), ""); err != nil || len(got) != 0 {
		t.Errorf("no rebuild: %v, %v; want no overrides", got, err)
	}
	for _, bad := range []string{"1.34.4", "v0.34.4", "v1.34.4-rc.0", "v1.35.0"} {
		if _, err := kubernetesLibraries("go.mod", []byte(goMod), bad); err == nil {
			t.Errorf("Kubernetes libraries %q: no error", bad)
		}
	}
}

// TestMakefileRepeatsConstants: the Makefile repeats two constants. The
// testbeds build the agent and the suite with CgoCFlags so that they reuse
// what `make test` compiled; a Makefile that exported other flags would
// silently make every kind run recompile.
func TestMakefileRepeatsConstants(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"export CGO_CFLAGS ?= " + CgoCFlags + "\n",
		// `make testbed-binaries GPU_ALLOCATION=dra` builds the Volcano
		// the suite's local profile then runs.
		"VOLCANO_DRA_VERSION := " + DefaultDRAVolcanoVersion + "\n",
	} {
		if !strings.Contains(string(data), want) {
			t.Errorf("the Makefile does not contain %q", want)
		}
	}
}
