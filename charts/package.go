package charts

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

// KubeVersion is the Kubernetes version the chart is linted and rendered
// for: the one the testbeds run. The chart itself asks for 1.30 or later.
var KubeVersion = chartutil.KubeVersion{Version: "v1.37.2", Major: "1", Minor: "37"}

// Lint checks the chart at dir as `helm lint --strict` does: a warning
// fails as an error does. values override the chart's defaults.
func Lint(dir string, values map[string]any) error {
	l := action.NewLint()
	l.Strict = true
	kv := KubeVersion
	l.KubeVersion = &kv
	res := l.Run([]string{dir}, values)
	if res.TotalChartsLinted != 1 && len(res.Errors) == 0 {
		return fmt.Errorf("linting %s: no chart linted", dir)
	}
	if len(res.Errors) > 0 {
		return fmt.Errorf("linting %s: %w", dir, errors.Join(res.Errors...))
	}
	return nil
}

// Load reads the chart at dir and checks that its version and appVersion
// equal version (the repository's VERSION file) when version is set.
func Load(dir, version string) (*chart.Chart, error) {
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("loading chart %s: %w", dir, err)
	}
	if version != "" && (ch.Metadata.Version != version || ch.Metadata.AppVersion != version) {
		return nil, fmt.Errorf("chart %s has version %q and appVersion %q, want both %q (the VERSION file)",
			dir, ch.Metadata.Version, ch.Metadata.AppVersion, version)
	}
	return ch, nil
}

// ReadVersion returns the trimmed content of a VERSION file.
func ReadVersion(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading version: %w", err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return v, nil
}

// PackageOptions configures Package.
type PackageOptions struct {
	// ChartDir is the chart's folder. Required.
	ChartDir string
	// OutDir receives <name>-<version>.tgz; created if missing. Required.
	OutDir string
	// Version, when set, must equal the chart's version and appVersion.
	// Default: not checked.
	Version string
}

// Package lints the chart strictly, checks its version and writes the
// archive `helm package` would, returning its path.
func Package(opts PackageOptions) (string, error) {
	if opts.ChartDir == "" || opts.OutDir == "" {
		return "", fmt.Errorf("a chart folder and an output folder are required (got %q, %q)", opts.ChartDir, opts.OutDir)
	}
	ch, err := Load(opts.ChartDir, opts.Version)
	if err != nil {
		return "", err
	}
	if err := Lint(opts.ChartDir, nil); err != nil {
		return "", err
	}
	if err := os.MkdirAll(opts.OutDir, 0o755); err != nil {
		return "", fmt.Errorf("creating %s: %w", opts.OutDir, err)
	}
	path, err := chartutil.Save(ch, opts.OutDir)
	if err != nil {
		return "", fmt.Errorf("packaging %s: %w", opts.ChartDir, err)
	}
	return path, nil
}
