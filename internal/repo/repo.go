// Package repo finds the gpulab repository a program or test runs in, for
// the commands and tests that build or read its sources.
package repo

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// Root finds the gpulab repository root: the nearest parent of the
// working directory holding a go.mod for github.com/gpulab/gpulab.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(data), "module github.com/gpulab/gpulab\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the gpulab repository: set GPULAB_CACHE to choose a cache directory")
		}
		dir = parent
	}
}
