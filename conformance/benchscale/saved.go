package benchscale

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/gpulab/gpulab/conformance/profile"
	"github.com/gpulab/gpulab/conformance/results"
)

// Files a scale's directory holds besides the suite's results.
const (
	cpuSecondsFile  = "cpu-seconds.json"
	apiRequestsFile = "kube-apiserver.requests.json"
	burstFile       = "burst-cpu.json"
	atRestFile      = "at-rest-cpu.json"
)

// ReadPoints reads back the scales measured under dir (its n-<N>/
// directories), so runs made one N at a time render as one report. A
// scale's CPU, burst and API server tables are left empty where its files
// are missing.
func ReadPoints(dir string) ([]Point, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var points []Point
	for _, e := range entries {
		n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "n-"))
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "n-") || err != nil || n < 1 {
			continue
		}
		sub := filepath.Join(dir, e.Name())
		r, err := results.Read(filepath.Join(sub, "results.json"))
		if err != nil {
			return nil, fmt.Errorf("scale %d: %w", n, err)
		}
		fleet, err := profile.LocalFleet(profile.Options{Scale: n})
		if err != nil {
			return nil, err
		}
		p := Point{N: n, Nodes: len(fleet.Nodes()), Results: r}
		for file, into := range map[string]any{cpuSecondsFile: &p.CPUSeconds, apiRequestsFile: &p.APIRequests, burstFile: &p.Burst, atRestFile: &p.AtRest} {
			data, err := os.ReadFile(filepath.Join(sub, file))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			if err := json.Unmarshal(data, into); err != nil {
				return nil, fmt.Errorf("%s: %w", filepath.Join(sub, file), err)
			}
		}
		points = append(points, p)
	}
	if len(points) == 0 {
		return nil, fmt.Errorf("no n-<N>/results.json under %s", dir)
	}
	sort.Slice(points, func(i, j int) bool { return points[i].N < points[j].N })
	return points, nil
}
