package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/gpulab/gpulab/conformance/results"
)

// baselineCommand makes a run the baseline later runs are compared with:
// baseline --from RUN/results.json --to conformance/baselines/local.json.
// Exit 0 when written, 1 when the run may not be a baseline or the file
// cannot be written, 2 on bad usage or a run it cannot read.
func baselineCommand(args []string, stdout, stderr io.Writer) int {
	const usage = "gpulab-conformance baseline --from RUN/results.json --to conformance/baselines/NAME.json [--allow-partial]"
	fs := newCommandFlags("baseline", stderr, usage)
	from := fs.String("from", "", "results.json of the run to promote (required)")
	to := fs.String("to", "", "baseline file to write (required)")
	allowPartial := fs.Bool("allow-partial", false, "promote a PARTIAL run (some assessment skipped)")
	if code, ok := parseCommandFlags(fs, args); !ok {
		return code
	}
	if *from == "" || *to == "" || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "usage: %s\n", usage)
		return results.ExitUsage
	}
	run, err := results.Read(*from)
	if err != nil {
		fmt.Fprintf(stderr, "reading the run: %v\n", err)
		return results.ExitUsage
	}
	base, err := results.Promote(run, results.PromoteOptions{AllowPartial: *allowPartial})
	if err != nil {
		fmt.Fprintf(stderr, "%s cannot be a baseline: %v\n", *from, err)
		return results.ExitFailed
	}
	if err := writeJSONAtomic(*to, base); err != nil {
		fmt.Fprintln(stderr, err)
		return results.ExitFailed
	}
	fmt.Fprintf(stdout, "baseline %s: %s run with %d measurements from %s\n", *to, base.Verdict, len(base.Measurements), *from)
	fmt.Fprintf(stdout, "  %s\n", results.Provenance{Environment: base.Environment, StartTime: base.StartTime})
	return results.ExitPassed
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
