// Command generate writes gpulab's Grafana dashboards (grafana/*.json), the
// PrometheusRule (prometheus/operator/prometheusrule.yaml) and the
// dashboards as sidecar ConfigMaps (prometheus/operator/grafana-dashboards.yaml)
// into the dashboards directory it runs in (`go generate ./dashboards`),
// and the Helm chart's copies of the dashboards and rule files
// (charts/gpulab/dashboards, charts/gpulab/files).
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/gpulab/gpulab/dashboards"
)

func main() {
	dir := "."
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	files, err := dashboards.Generate(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := os.WriteFile(path, files[name], 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("wrote", path)
	}
}
