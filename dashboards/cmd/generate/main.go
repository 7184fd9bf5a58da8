// Command generate writes gpulab's Grafana dashboards (grafana/*.json) and
// the PrometheusRule (prometheus/operator/prometheusrule.yaml) into the
// dashboards directory it runs in (`go generate ./dashboards`).
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
		if err := os.WriteFile(filepath.Join(dir, name), files[name], 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("wrote", filepath.Join(dir, name))
	}
}
