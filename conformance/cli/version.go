package cli

import (
	"fmt"
	"io"

	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/internal/version"
)

// versionCommand prints the suite's build: version [-h].
func versionCommand(args []string, stdout, stderr io.Writer) int {
	fs := newCommandFlags("version", stderr, "gpulab-conformance version")
	if code, ok := parseCommandFlags(fs, args); !ok {
		return code
	}
	fmt.Fprintf(stdout, "gpulab-conformance %s\n", version.Get())
	return results.ExitPassed
}
