package bench

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Options are what every benchmark is given, whatever it measures.
type Options struct {
	// Suite and Operator are the gpulab-conformance and gpulab-operator
	// binaries (required).
	Suite, Operator string
	// Out receives each run's results, the operators' logs and the
	// benchmark's report (required).
	Out string
	// TestbedName names the testbeds, or prefixes their names where a
	// benchmark brings up several (default: the benchmark's own, given to
	// Defaults).
	TestbedName string
	// Log receives progress and the suite's output (default io.Discard).
	Log io.Writer
}

// Defaults fills in the defaults, testbedName for an empty TestbedName,
// and checks that the binaries and the output directory are named.
func (o *Options) Defaults(testbedName string) error {
	if o.TestbedName == "" {
		o.TestbedName = testbedName
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Suite == "" || o.Operator == "" || o.Out == "" {
		return errors.New("the suite and operator binaries and an output directory are required")
	}
	return nil
}

// CheckScales fails unless every gang count is at least 1.
func CheckScales(scales []int) error {
	for _, n := range scales {
		if n < 1 {
			return fmt.Errorf("every scale must be at least 1, got %d", n)
		}
	}
	return nil
}

// ParseScales reads a comma-separated list of gang counts, as a command's
// flag gives them; each must be at least 1.
func ParseScales(list string) ([]int, error) {
	var out []int
	for _, s := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive gang count", s)
		}
		out = append(out, n)
	}
	return out, nil
}
