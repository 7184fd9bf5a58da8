package binaries

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
)

// Versions of the monitoring tools the dashboards are checked with.
// Prometheus publishes its Go module as v0.<major><minor>.<patch>: v0.316.0
// is Prometheus 3.16.0.
const (
	PrometheusVersion  = "v0.316.0"
	PushgatewayVersion = "v1.11.3"
)

// promCommonVersion is where Prometheus programs read their version from.
const promCommonVersion = "github.com/prometheus/common/version"

// prometheus installs straight from the proxy (its go.mod has no replace
// directives). Without the builtinassets tag there is no web UI, which
// nothing here uses; remove_all_sd keeps only file and HTTP service
// discovery, which the local scrape config uses, and saves compiling every
// cloud SDK.
var prometheus = component{
	name:     "prometheus",
	version:  PrometheusVersion,
	binaries: []string{"prometheus", "promtool"},
	build: func(ctx context.Context, b *builder, out string) error {
		release, err := prometheusRelease(PrometheusVersion)
		if err != nil {
			return err
		}
		ldflags := append([]string{"-s", "-w"}, ldflagsX(promCommonVersion, map[string]string{
			"Version": release, "Branch": "HEAD", "BuildUser": "gpulab",
		})...)
		return b.goCmd(ctx, out, "prometheus", []string{"GOBIN=" + out}, "install", "-trimpath",
			"-tags=netgo,remove_all_sd", "-ldflags="+strings.Join(ldflags, " "),
			"github.com/prometheus/prometheus/cmd/prometheus@"+PrometheusVersion,
			"github.com/prometheus/prometheus/cmd/promtool@"+PrometheusVersion)
	},
}

// The proxy refuses the Pushgateway's version list, which `go install
// pkg@version` reads for deprecations, so a throwaway module that requires
// the one version builds it.
var pushgateway = component{
	name:     "pushgateway",
	version:  PushgatewayVersion,
	binaries: []string{"pushgateway"},
	build: func(ctx context.Context, b *builder, out string) error {
		src, err := b.srcDir("pushgateway", PushgatewayVersion)
		if err != nil {
			return err
		}
		files := map[string]string{
			"go.mod":   fmt.Sprintf("module gpulab.local/build/pushgateway\n\ngo 1.26.0\n\nrequire github.com/prometheus/pushgateway %s\n", PushgatewayVersion),
			"tools.go": "//go:build tools\n\npackage tools\n\nimport _ \"github.com/prometheus/pushgateway\"\n",
		}
		if err := writeFiles(src, files); err != nil {
			return err
		}
		if err := b.goCmd(ctx, src, "pushgateway", nil, "mod", "tidy"); err != nil {
			return err
		}
		ldflags := append([]string{"-s", "-w"}, ldflagsX(promCommonVersion, map[string]string{
			"Version": strings.TrimPrefix(PushgatewayVersion, "v"), "Branch": "HEAD", "BuildUser": "gpulab",
		})...)
		return b.goCmd(ctx, src, "pushgateway", nil, "build", "-trimpath", "-tags=netgo",
			"-ldflags="+strings.Join(ldflags, " "), "-o", filepath.Join(out, "pushgateway"), "github.com/prometheus/pushgateway")
	},
}

// prometheusRelease turns Prometheus' module version into its release:
// v0.316.0 -> 3.16.0.
func prometheusRelease(module string) (string, error) {
	parts := strings.Split(strings.TrimPrefix(module, "v0."), ".")
	if !strings.HasPrefix(module, "v0.") || len(parts) != 2 || len(parts[0]) != 3 {
		return "", fmt.Errorf("unexpected Prometheus module version %q (want v0.<major><minor>.<patch>)", module)
	}
	minor := strings.TrimLeft(parts[0][1:], "0")
	if minor == "" {
		minor = "0"
	}
	return parts[0][:1] + "." + minor + "." + parts[1], nil
}

// Monitoring is the absolute paths of the Prometheus tools.
type Monitoring struct {
	Prometheus  string
	Promtool    string
	Pushgateway string
}

// EnsureMonitoring builds Prometheus, promtool and the Pushgateway if they
// are missing from the cache.
func EnsureMonitoring(ctx context.Context, opts Options) (*Monitoring, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &builder{opts: opts}
	if err := b.ensureAll(ctx, monitoringComponents); err != nil {
		return nil, err
	}
	return b.monitoring(), nil
}

// LookupMonitoring returns the Prometheus tools if they are built, without
// building.
func LookupMonitoring(_ context.Context, opts Options) (*Monitoring, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &builder{opts: opts}
	for _, c := range monitoringComponents {
		if !b.built(c) {
			return nil, notBuilt(c, opts.CacheDir)
		}
	}
	return b.monitoring(), nil
}

func (b *builder) monitoring() *Monitoring {
	return &Monitoring{
		Prometheus:  b.path(prometheus, "prometheus"),
		Promtool:    b.path(prometheus, "promtool"),
		Pushgateway: b.path(pushgateway, "pushgateway"),
	}
}
