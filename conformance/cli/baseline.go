package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpulab/gpulab/conformance/results"
)

const baselineUsage = "gpulab-conformance baseline promote --to BASELINE [--allow-partial] [--allow-different] RUN... (or --from RUN; \"promote\" may be left out)\n" +
	"  --to a directory: the baseline set, each RUN (a results.json, or a directory searched for them, medians skipped) as DIR/run-<i>/results.json and DIR/baseline.json\n" +
	"  --to configmap:NAMESPACE/NAME: the set as one ConfigMap in the cluster (--kubeconfig, --context), labelled " + BaselineSetLabel + "=NAME; nightly --baseline reads it\n" +
	"  --to a .json file: one run (the form before baseline sets)"

// baselineCommand makes runs the baseline later runs are compared with:
// baseline promote --to conformance/baselines/local RUN..., a directory
// holding each run, --to configmap:NAMESPACE/NAME, the same set in the
// cluster, or --to NAME.json, one run in one file. Exit 0 when written, 1
// when a run may not be a baseline or the baseline cannot be written, 2 on
// bad usage or a run it cannot read.
func baselineCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "promote" {
		args = args[1:]
	}
	fs := newCommandFlags("baseline", stderr, baselineUsage)
	var from pathsFlag
	fs.Var(&from, "from", "a run to promote, `PATH`: results.json, or a directory of runs (repeat for several, or name them after the flags)")
	to := fs.String("to", "", "baseline directory, or .json file for a single run, to write (required)")
	allowPartial := fs.Bool("allow-partial", false, "promote a PARTIAL run (some assessment skipped)")
	allowDifferent := fs.Bool("allow-different", false, "promote runs that differ in scale, workload, profile, scheduler or host class")
	kubeconfig := fs.String("kubeconfig", "", "--to configmap:...: kubeconfig (default $KUBECONFIG, ~/.kube/config, else in-cluster)")
	kubeContext := fs.String("context", "", "--to configmap:...: kubeconfig context (default its current one)")
	positional, code, ok := parseInterspersed(fs, args)
	if !ok {
		return code
	}
	from = append(from, positional...)
	if len(from) == 0 || *to == "" {
		fmt.Fprintf(stderr, "usage: %s\n", baselineUsage)
		return results.ExitUsage
	}
	runs, skipped, err := results.ReadRuns(from...)
	if err != nil {
		fmt.Fprintf(stderr, "reading the run: %v\n", err)
		return results.ExitUsage
	}
	for _, s := range skipped {
		fmt.Fprintf(stderr, "baseline: skipped %s\n", s)
	}
	opts := results.PromoteOptions{AllowPartial: *allowPartial, AllowDifferent: *allowDifferent}
	if strings.HasSuffix(*to, ".json") {
		return promoteFile(runs, *to, opts, stdout, stderr)
	}
	store, err := openBaseline(*to, *kubeconfig, *kubeContext)
	if err != nil {
		fmt.Fprintf(stderr, "--to: %v\n", err)
		return results.ExitUsage
	}
	set, err := results.PromoteRuns(runs, opts)
	if err != nil {
		fmt.Fprintf(stderr, "cannot be a baseline: %v\n", err)
		return results.ExitFailed
	}
	manifest, err := store.Save(context.Background(), runs, set, time.Now())
	if err != nil {
		fmt.Fprintln(stderr, err)
		return results.ExitFailed
	}
	fmt.Fprintf(stdout, "baseline %s: %d runs, promoted %s from commit %s\n", *to, len(set),
		manifest.PromotedAt.Format(time.RFC3339), orUnknown(manifest.Commit))
	for i, r := range manifest.Runs {
		fmt.Fprintf(stdout, "  %s: %s run with %d measurements from %s\n", r.Path, r.Verdict, len(set[i].Measurements), r.From)
	}
	fmt.Fprintf(stdout, "  %s\n", results.Provenance{Environment: set[0].Environment, StartTime: set[0].StartTime})
	if len(set) == 1 {
		fmt.Fprintln(stdout, "  note: from one run compare forms no interval, and decides by the change alone; promote 3 or more")
	}
	return results.ExitPassed
}

// errNoBaseline is a baseline source that holds no set yet: the nightly's
// first night, which records one.
var errNoBaseline = errors.New("no baseline recorded yet")

// baselineStore is where a baseline set lives: a directory beside the
// nightly (a laptop, CI's cache) or a ConfigMap in the cluster it measures.
type baselineStore interface {
	String() string
	// Load reads the set's runs; scratch is a directory it may write them
	// to. An absent or empty set is errNoBaseline (wrapped).
	Load(ctx context.Context, scratch string) ([]results.Run, error)
	// Save replaces the set, whole or not at all.
	Save(ctx context.Context, runs []results.Run, set []*results.Results, now time.Time) (results.BaselineManifest, error)
}

// openBaseline is the store a --baseline or --to value names:
// configmap:NAMESPACE/NAME, or a directory. Nothing is read yet.
func openBaseline(src, kubeconfig, kubeContext string) (baselineStore, error) {
	switch {
	case strings.TrimSpace(src) == "":
		return nil, errors.New("no baseline named")
	case strings.HasPrefix(src, configMapSource):
		return newConfigMapStore(src, kubeconfig, kubeContext)
	case strings.Contains(src, ":") && !strings.ContainsAny(src, `/\`):
		return nil, fmt.Errorf("%q: want a directory or configmap:NAMESPACE/NAME", src)
	default:
		return dirStore(src), nil
	}
}

// dirStore is a baseline set in a directory (or, read-only, a single-run
// .json file of before baseline sets).
type dirStore string

func (d dirStore) String() string { return string(d) }

func (d dirStore) Load(_ context.Context, _ string) ([]results.Run, error) {
	entries, err := os.ReadDir(string(d))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("%s: %w", d, errNoBaseline)
	case err == nil && len(entries) == 0:
		return nil, fmt.Errorf("%s is empty: %w", d, errNoBaseline)
	}
	runs, _, err := results.ReadRuns(string(d))
	if err != nil {
		return nil, fmt.Errorf("reading the baseline %s: %w", d, err)
	}
	return runs, nil
}

func (d dirStore) Save(_ context.Context, runs []results.Run, set []*results.Results, now time.Time) (results.BaselineManifest, error) {
	if strings.HasSuffix(string(d), ".json") {
		return results.BaselineManifest{}, fmt.Errorf("%s: a .json baseline holds one run; name a directory for a baseline set", d)
	}
	return writeBaselineDir(string(d), runs, set, now)
}

// promoteFile writes the single-run baseline file of before baseline sets.
func promoteFile(runs []results.Run, to string, opts results.PromoteOptions, stdout, stderr io.Writer) int {
	if len(runs) != 1 {
		fmt.Fprintf(stderr, "%s: a .json baseline holds one run, and %d were given; give --to a directory for a baseline set\n", to, len(runs))
		return results.ExitUsage
	}
	base, err := results.Promote(runs[0].Results, opts)
	if err != nil {
		fmt.Fprintf(stderr, "%s cannot be a baseline: %v\n", runs[0].Path, err)
		return results.ExitFailed
	}
	if err := writeJSONAtomic(to, base); err != nil {
		fmt.Fprintln(stderr, err)
		return results.ExitFailed
	}
	fmt.Fprintf(stdout, "baseline %s: %s run with %d measurements from %s\n", to, base.Verdict, len(base.Measurements), runs[0].Path)
	fmt.Fprintf(stdout, "  %s\n", results.Provenance{Environment: base.Environment, StartTime: base.StartTime})
	return results.ExitPassed
}

// writeBaselineDir replaces dir with a baseline set: run-<i>/results.json
// for each run and the manifest. The set is written beside dir and renamed
// into place, so a failure leaves the old set whole. A dir that exists
// must be an earlier baseline set (it holds the manifest) or empty: other
// files are never deleted.
func writeBaselineDir(dir string, runs []results.Run, set []*results.Results, now time.Time) (results.BaselineManifest, error) {
	var m results.BaselineManifest
	dir = filepath.Clean(dir)
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		if _, err := os.Stat(filepath.Join(dir, results.BaselineManifestFile)); err != nil {
			return m, fmt.Errorf("%s exists and is not a baseline set (no %s): not replacing it", dir, results.BaselineManifestFile)
		}
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return m, fmt.Errorf("writing %s: %w", dir, err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return m, fmt.Errorf("writing %s: %w", dir, err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "."+filepath.Base(dir)+".*.tmp")
	if err != nil {
		return m, fmt.Errorf("writing %s: %w", dir, err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	paths := make([]string, len(set))
	for i, base := range set {
		paths[i] = fmt.Sprintf("run-%d/%s", i+1, results.ResultsFile)
		if err := writeJSONAtomic(filepath.Join(tmp, filepath.FromSlash(paths[i])), base); err != nil {
			return m, err
		}
	}
	m = results.NewBaselineManifest(runs, paths, now)
	if err := writeJSONAtomic(filepath.Join(tmp, results.BaselineManifestFile), m); err != nil {
		return m, err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return m, fmt.Errorf("writing %s: %w", dir, err)
	}
	old := tmp + ".old"
	if err := os.Rename(dir, old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return m, fmt.Errorf("writing %s: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		_ = os.Rename(old, dir) // put the old set back
		return m, fmt.Errorf("writing %s: %w", dir, err)
	}
	if err := os.RemoveAll(old); err != nil {
		return m, fmt.Errorf("removing the old set %s: %w", old, err)
	}
	return m, nil
}

// writeJSONAtomic writes v as indented JSON to path through a temporary
// file in the same directory and a rename, so a crash leaves the old
// baseline whole rather than half a new one.
func writeJSONAtomic(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
