package local

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gpulab/gpulab/testbeds/binaries"
)

// TestVolcanoReleasesCoverEveryVersion: every Volcano the binaries package
// builds has settings here, and nothing else does.
func TestVolcanoReleasesCoverEveryVersion(t *testing.T) {
	built := binaries.VolcanoVersions()
	for _, v := range built {
		if _, err := volcanoReleaseOf(v); err != nil {
			t.Error(err)
		}
	}
	for v := range volcanoReleases {
		if !slices.Contains(built, v) {
			t.Errorf("settings for Volcano %s, which is not built (binaries.VolcanoVersions: %v)", v, built)
		}
	}
	if _, err := newVolcanoSetup("/state", "/kubeconfig", Ports{}, "v1.15.1"); err == nil {
		t.Error("newVolcanoSetup accepted Volcano v1.15.1, which has no settings")
	}
}

// TestVolcanoArgsFollowTheVersion: each version gets the flags it has, and
// only those.
func TestVolcanoArgsFollowTheVersion(t *testing.T) {
	bins := &binaries.Set{VolcanoScheduler: "/c/vc-scheduler", VolcanoControllerManager: "/c/vc-controller-manager", VolcanoModuleDir: "/mod"}
	for version, want := range map[string]bool{"v1.10.0": false, "v1.14.1": true, "": true} {
		v, err := newVolcanoSetup("/state", "/kubeconfig", Ports{SchedulerMetrics: 1, SchedulerHealthz: 2, ControllerManagerHealthz: 3}, version)
		if err != nil {
			t.Fatal(err)
		}
		components := v.components("/work", bins)
		if len(components) != 2 || components[0].Name != "vc-scheduler" || components[1].Name != "vc-controller-manager" {
			t.Fatalf("Volcano %q components %+v, want vc-scheduler and vc-controller-manager", version, components)
		}
		sched, cm := components[0].Args, components[1].Args
		for _, arg := range []string{"--kubeconfig=/kubeconfig", "--scheduler-conf=/state/volcano-scheduler.conf", "--leader-elect=false",
			"--listen-address=127.0.0.1:1", "--healthz-address=127.0.0.1:2"} {
			if !slices.Contains(sched, arg) {
				t.Errorf("Volcano %q scheduler args %v lack %s", version, sched, arg)
			}
		}
		for _, arg := range []string{"--kubeconfig=/kubeconfig", "--leader-elect=false", "--controllers=pg-controller,queue-controller,job-controller",
			"--healthz-address=127.0.0.1:3"} {
			if !slices.Contains(cm, arg) {
				t.Errorf("Volcano %q controller-manager args %v lack %s", version, cm, arg)
			}
		}
		if got := slices.Contains(sched, "--disable-default-scheduler-config=true"); got != want {
			t.Errorf("Volcano %q: --disable-default-scheduler-config passed %v, want %v (v1.10.0 has no such flag)", version, got, want)
		}
		if dirs := v.crdDirs(bins); !slices.Equal(dirs, []string{"/mod/config/crd/volcano/bases", "/mod/config/crd/jobflow/bases"}) {
			t.Errorf("Volcano %q CRD folders %v", version, dirs)
		}
	}
}

// TestVolcanoSettingsMatchTheModule reads each version's module: its CRD
// folders hold CRDs, including every one the scheduler's informers wait
// for; every action and plugin of the scheduler configuration, every
// controller enabled and every version-only flag exists in that version's
// source. It downloads the modules (skipped with -short).
func TestVolcanoSettingsMatchTheModule(t *testing.T) {
	if testing.Short() {
		t.Skip("downloads Volcano's modules; skipped with -short")
	}
	for _, version := range binaries.VolcanoVersions() {
		t.Run(version, func(t *testing.T) {
			r, err := volcanoReleaseOf(version)
			if err != nil {
				t.Fatal(err)
			}
			mod := downloadModule(t, "volcano.sh/volcano", binaries.VolcanoModuleVersion(version))
			var crds []string
			for _, dir := range r.crdDirs {
				files, _ := filepath.Glob(filepath.Join(mod, filepath.FromSlash(dir), "*.yaml"))
				if len(files) == 0 {
					t.Errorf("no CRDs in %s of volcano.sh/volcano@%s", dir, version)
				}
				for _, f := range files {
					crds = append(crds, filepath.Base(f))
				}
			}
			want := []string{"scheduling.volcano.sh_podgroups.yaml", "scheduling.volcano.sh_queues.yaml", "batch.volcano.sh_jobs.yaml",
				"bus.volcano.sh_commands.yaml", "flow.volcano.sh_jobflows.yaml"}
			if version != "v1.10.0" {
				// The v1.14 scheduler's cache waits for HyperNodes and
				// NodeShards.
				want = append(want, "topology.volcano.sh_hypernodes.yaml", "shard.volcano.sh_nodeshards.yaml")
			}
			for _, w := range want {
				if !slices.Contains(crds, w) {
					t.Errorf("Volcano %s: the CRDs installed (%v) lack %s", version, crds, w)
				}
			}

			var conf struct {
				Actions string `json:"actions"`
				Tiers   []struct {
					Plugins []struct {
						Name string `json:"name"`
					} `json:"plugins"`
				} `json:"tiers"`
			}
			if err := yaml.Unmarshal([]byte(r.schedulerConf), &conf); err != nil {
				t.Fatalf("scheduler configuration: %v", err)
			}
			for a := range strings.SplitSeq(conf.Actions, ",") {
				if _, err := os.Stat(filepath.Join(mod, "pkg", "scheduler", "actions", strings.TrimSpace(a))); err != nil {
					t.Errorf("Volcano %s has no action %q: %v", version, a, err)
				}
			}
			for _, tier := range conf.Tiers {
				for _, p := range tier.Plugins {
					if _, err := os.Stat(filepath.Join(mod, "pkg", "scheduler", "plugins", p.Name)); err != nil {
						t.Errorf("Volcano %s has no plugin %q: %v", version, p.Name, err)
					}
				}
			}

			controllers := sourceText(t, filepath.Join(mod, "pkg", "controllers"))
			for c := range strings.SplitSeq(r.controllers, ",") {
				if !strings.Contains(controllers, `"`+c+`"`) {
					t.Errorf("Volcano %s has no controller %q", version, c)
				}
			}
			options := sourceText(t, filepath.Join(mod, "cmd", "scheduler", "app", "options"))
			flag := regexp.MustCompile(`^--([a-z-]+)`)
			for _, arg := range r.schedulerArgs {
				name := flag.FindStringSubmatch(arg)
				if name == nil || !strings.Contains(options, `"`+name[1]+`"`) {
					t.Errorf("Volcano %s's scheduler has no flag for %s", version, arg)
				}
			}
		})
	}
}

// TestNewRejectsUnknownVersions: New refuses a version the testbed cannot
// build, from Options or the environment, before touching the cache.
func TestNewRejectsUnknownVersions(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "cache")
	for _, tc := range []struct {
		opts Options
		env  [2]string
		want string
	}{
		{opts: Options{VolcanoVersion: "v1.15.1"}, want: "QueueAllocationGateKey"},
		{opts: Options{KubeRayVersion: "v1.7.0"}, want: "v1.5.0, v1.6.2"},
		{env: [2]string{"v1.9.0", ""}, want: "$" + binaries.VolcanoVersionEnv},
		{env: [2]string{"", "v1.4.0"}, want: "$" + binaries.KubeRayVersionEnv},
	} {
		t.Setenv(binaries.VolcanoVersionEnv, tc.env[0])
		t.Setenv(binaries.KubeRayVersionEnv, tc.env[1])
		opts := tc.opts
		opts.CacheDir, opts.CRDDir = cache, t.TempDir()
		_, err := New(opts)
		if !errors.Is(err, binaries.ErrUnknownVersion) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) with versions %q in the environment: %v, want ErrUnknownVersion mentioning %q", tc.opts, tc.env, err, tc.want)
		}
	}
	if _, err := os.Stat(cache); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the cache was touched (%v)", err)
	}
}

// TestVersionsAreTheTestbeds: Versions is what Options ask for until the
// testbed records what it runs; a testbed recorded before versions were
// ran v1.10.0 and v1.5.0.
func TestVersionsAreTheTestbeds(t *testing.T) {
	t.Setenv(binaries.VolcanoVersionEnv, "")
	t.Setenv(binaries.KubeRayVersionEnv, "")
	tb, err := New(Options{CacheDir: t.TempDir(), CRDDir: t.TempDir(), KubeRay: true, KubeRayVersion: "v1.5.0"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tb.Versions(), (Versions{Volcano: binaries.DefaultVolcanoVersion, KubeRay: "v1.5.0", KubeRayRuns: true}); got != want {
		t.Errorf("before up: %+v, want %+v", got, want)
	}
	if got, want := tb.Versions().String(), "Volcano "+binaries.DefaultVolcanoVersion+", KubeRay v1.5.0"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	bopts := tb.binariesOptions()
	if bopts.VolcanoVersion != binaries.DefaultVolcanoVersion || bopts.KubeRayVersion != "v1.5.0" {
		t.Errorf("binaries options %+v, want the testbed's versions", bopts)
	}

	if err := writeFeatures(tb.stateDir(), featureSet{VolcanoVersion: "v1.10.0", KubeRayVersion: "v1.6.2"}); err != nil {
		t.Fatal(err)
	}
	if got, want := tb.Versions(), (Versions{Volcano: "v1.10.0", KubeRay: "v1.6.2"}); got != want {
		t.Errorf("recorded: %+v, want %+v", got, want)
	}
	if got := tb.Versions().String(); got != "Volcano v1.10.0" {
		t.Errorf("String() without KubeRay = %q", got)
	}
	if bopts := tb.binariesOptions(); bopts.VolcanoVersion != "v1.10.0" {
		t.Errorf("binaries options %+v, want the recorded Volcano v1.10.0", bopts)
	}

	if err := os.WriteFile(featuresPath(tb.stateDir()), []byte(`{"kubeRay":true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := tb.Versions(), (Versions{Volcano: "v1.10.0", KubeRay: "v1.5.0", KubeRayRuns: true}); got != want {
		t.Errorf("recorded before versions were: %+v, want %+v", got, want)
	}
}

// downloadModule returns a module's folder in the module cache.
func downloadModule(t *testing.T, path, version string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", "mod", "download", "-json", path+"@"+version)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	cmd.Dir = t.TempDir()
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	_ = json.Unmarshal(out, &info)
	if err != nil || info.Dir == "" {
		t.Fatalf("go mod download %s@%s: %v %s", path, version, err, info.Error)
	}
	return info.Dir
}

// sourceText is every non-test Go file under dir, concatenated.
func sourceText(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		data, err := os.ReadFile(path)
		b.Write(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// Volcano v1.14 allocates the ResourceClaims of the pods it places; v1.10,
// whose DRA was the withdrawn classic API, is not asked to.
func TestVolcanoAllocatesClaimsFromV114(t *testing.T) {
	const arg = "  - name: predicates\n    arguments:\n      predicate.DynamicResourceAllocationEnable: true\n"
	if !strings.Contains(volcanoReleases["v1.14.1"].schedulerConf, arg) {
		t.Errorf("v1.14.1's scheduler configuration does not turn DRA on:\n%s", volcanoReleases["v1.14.1"].schedulerConf)
	}
	if strings.Contains(volcanoReleases["v1.10.0"].schedulerConf, "DynamicResourceAllocation") {
		t.Error("v1.10.0's scheduler configuration turns DRA on")
	}
}
