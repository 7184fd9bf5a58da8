package cli

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// perfDataUsage is --perfdata's help on run and median: one line.
const perfDataUsage = "also write clusterloader2 PerfData JSON (for perfdash) into this directory"

// preparePerfDataDir creates dir and proves it writable, so a bad
// --perfdata stops the command before it measures anything rather than
// after. It returns the absolute path: the suite may run from elsewhere.
func preparePerfDataDir(dir string) (string, error) {
	if strings.TrimSpace(dir) == "" {
		return "", errors.New("--perfdata must not be empty")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("--perfdata=%q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", fmt.Errorf("--perfdata=%q: %w", dir, err)
	}
	probe, err := os.CreateTemp(abs, ".perfdata-probe-*")
	if err != nil {
		return "", fmt.Errorf("--perfdata=%q is not writable: %w", dir, err)
	}
	name := probe.Name()
	return abs, errors.Join(probe.Close(), os.Remove(name))
}

// isFlagSet says whether the command line named the flag, so an explicit
// empty --perfdata= is a mistake rather than "off".
func isFlagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
