// Command gpulab-chart packages gpulab's Helm chart, as `helm package` does
// after `helm lint --strict`, and checks its version against VERSION.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/gpulab/gpulab/charts"
)

func main() {
	var opts charts.PackageOptions
	var versionFile string
	flag.StringVar(&opts.ChartDir, "chart", "charts/gpulab", "the chart's folder")
	flag.StringVar(&opts.OutDir, "out", "_artifacts/chart", "folder that receives <name>-<version>.tgz")
	flag.StringVar(&versionFile, "version-file", "VERSION", "file whose version the chart's version and appVersion must equal; empty skips the check")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "gpulab-chart: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	if versionFile != "" {
		v, err := charts.ReadVersion(versionFile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gpulab-chart:", err)
			os.Exit(1)
		}
		opts.Version = v
	}
	path, err := charts.Package(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpulab-chart:", err)
		os.Exit(1)
	}
	fmt.Println(path)
}
