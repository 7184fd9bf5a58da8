package results

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
)

// PerfData is clusterloader2's measurement format (perftype.PerfData in
// kubernetes/perf-tests), which perfdash and CL2's tooling read: a version,
// data items and labels for the whole set.
type PerfData struct {
	// Version lets readers keep series of one format apart; PerfDataVersion.
	Version   string     `json:"version"`
	DataItems []DataItem `json:"dataItems"`
	// Labels describe the run: profile, cluster, workload, versions.
	Labels map[string]string `json:"labels,omitempty"`
}

// DataItem is one measurement: percentile buckets, their unit, and the
// labels naming it ({"Metric": "create_to_all_bound"}).
type DataItem struct {
	// Data maps a bucket (Perc50, Perc90, Perc99, Max) to its value; every
	// item has all four, so a series keeps its buckets from run to run.
	Data   map[string]float64 `json:"data"`
	Unit   string             `json:"unit"`
	Labels map[string]string  `json:"labels,omitempty"`
}

// PerfDataVersion is the version every PerfData file carries, as CL2's
// own measurements do; bump it on an incompatible change of names or units.
const PerfDataVersion = "v1"

// PerfDataMeasurement is the measurement part of every file name: files
// are <PerfDataMeasurement>_<feature>_<workload>_<end time>.json, CL2's
// <summary>_<test>_<time> layout, so a perfdash test description with
// OutputFilePrefix "GpulabConformance_latency" and Name "gpucluster" (and
// parser parsePerfData) charts the latency feature's GPUCluster runs.
const PerfDataMeasurement = "GpulabConformance"

// perfDataTime is the end time in file names: ISO 8601's basic format,
// without the colons that GitHub artifact uploads and Windows refuse.
const perfDataTime = "20060102T150405Z"

// perfUnits converts the results' base units to the ones CL2 charts use
// (latencies in ms, memory in MiB, CPU in cores); other units pass as they are.
var perfUnits = map[string]struct {
	unit   string
	factor float64
}{
	"seconds":    {"ms", 1000},
	"bytes":      {"MiB", 1.0 / (1 << 20)},
	"millicores": {"cores", 1.0 / 1000},
}

// notInName is what a feature or workload name may not carry into a file
// name: perfdash splits names on "_".
var notInName = regexp.MustCompile(`[^A-Za-z0-9-]+`)

// PerfDataFile is one PerfData file: its name and content.
type PerfDataFile struct {
	Name string
	Data PerfData
}

// PerfDataFiles maps the results to CL2 PerfData, one file per feature
// that has measurements, in the order they were measured. A measurement
// without samples (not measured, or its assessment skipped) or with a
// value that is not a number is left out, never written as zero; a feature
// left with nothing gets no file.
func (r *Results) PerfDataFiles() ([]PerfDataFile, error) {
	if r.EndTime.IsZero() {
		return nil, errors.New("perfdata: the results have no end time to name the files by")
	}
	status := map[string]Status{}
	for _, f := range r.Features {
		status[f.Name] = FeatureStatus(f.Assessments)
	}
	var files []PerfDataFile
	byFeature := map[string]int{}
	seen := map[string]bool{}
	for _, m := range r.Measurements {
		item, ok := perfDataItem(m)
		if !ok {
			continue
		}
		if seen[m.Key()] {
			return nil, fmt.Errorf("perfdata: the results measure %s twice", m.Key())
		}
		seen[m.Key()] = true
		i, ok := byFeature[m.Feature]
		if !ok {
			i = len(files)
			byFeature[m.Feature] = i
			files = append(files, PerfDataFile{
				Name: fmt.Sprintf("%s_%s_%s_%s.json", PerfDataMeasurement, nameSafe(m.Feature), nameSafe(r.Environment.WorkloadName()), r.EndTime.UTC().Format(perfDataTime)),
				Data: PerfData{Version: PerfDataVersion, Labels: r.perfDataLabels(m.Feature, status[m.Feature])},
			})
		}
		files[i].Data.DataItems = append(files[i].Data.DataItems, item)
	}
	return files, nil
}

// WritePerfData writes PerfDataFiles into dir (created if missing) and
// returns the paths written.
func (r *Results) WritePerfData(dir string) ([]string, error) {
	files, err := r.PerfDataFiles()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("writing perfdata: %w", err)
	}
	var paths []string
	for _, f := range files {
		data, err := json.MarshalIndent(f.Data, "", "  ")
		if err != nil {
			return paths, fmt.Errorf("encoding %s: %w", f.Name, err)
		}
		path := filepath.Join(dir, f.Name)
		if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
			return paths, fmt.Errorf("writing perfdata: %w", err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}

func perfDataItem(m Measurement) (DataItem, bool) {
	if m.Samples < 1 {
		return DataItem{}, false
	}
	unit, factor := m.Unit, 1.0
	if u, ok := perfUnits[m.Unit]; ok {
		unit, factor = u.unit, u.factor
	}
	data := map[string]float64{}
	for bucket, v := range map[string]float64{"Perc50": m.P50, "Perc90": m.P90, "Perc99": m.P99, "Max": m.Max} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return DataItem{}, false
		}
		data[bucket] = roundMicro(v * factor)
	}
	return DataItem{Data: data, Unit: unit, Labels: map[string]string{"Metric": m.Name}}, true
}

// roundMicro keeps six decimals, so 1.120526345 s is 1120.526345 ms and
// not the float noise of the multiplication.
func roundMicro(v float64) float64 { return math.Round(v*1e6) / 1e6 }

func (r *Results) perfDataLabels(feature string, status Status) map[string]string {
	e := r.Environment
	labels := map[string]string{
		"Feature":  feature,
		"Profile":  e.Profile,
		"Cluster":  PushCluster(e),
		"Workload": e.WorkloadName(),
		"Scale":    strconv.Itoa(e.Scale),
		"Verdict":  string(r.RunVerdict()),
	}
	if status != "" {
		labels["FeatureStatus"] = string(status)
	}
	for k, v := range map[string]string{
		"SuiteVersion": e.SuiteVersion, "SuiteCommit": e.SuiteCommit,
		"OperatorVersion": e.OperatorVersion, "OperatorCommit": e.OperatorCommit,
		"KubernetesVersion": e.KubernetesVersion, "VolcanoVersion": e.VolcanoVersion,
	} {
		if v != "" {
			labels[k] = v
		}
	}
	return labels
}

func nameSafe(s string) string {
	if s = notInName.ReplaceAllString(s, "-"); s == "" {
		return "none"
	}
	return s
}
