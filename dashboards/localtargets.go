package dashboards

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// LocalTargets are the loopback addresses (host:port) the local scrape
// config (prometheus/local/prometheus.yml) scrapes; an empty one is written
// as a job with no target.
type LocalTargets struct {
	Operator, Agent, VolcanoScheduler, Pushgateway string
	// VolcanoControllerManager is vc-controller-manager's /metrics, where
	// Volcano v1.14 serves its queue metrics; empty for v1.10.
	VolcanoControllerManager string
	// Cluster is the cluster label every target gets, as a multi-cluster
	// Prometheus (or Thanos, Mimir) sets it; the dashboards' cluster
	// variable lists it. Empty: no cluster label.
	Cluster string
}

// Write writes one file_sd file per job into dir (prometheus/local/targets
// for the shipped config).
func (t LocalTargets) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for job, addr := range map[string]string{
		"gpulab-operator": t.Operator, "gpulab-agent": t.Agent,
		"volcano-scheduler": t.VolcanoScheduler, "volcano-controller-manager": t.VolcanoControllerManager, "pushgateway": t.Pushgateway,
	} {
		groups := []map[string]any{}
		if addr != "" {
			g := map[string]any{"targets": []string{addr}}
			if t.Cluster != "" {
				g["labels"] = map[string]string{"cluster": t.Cluster}
			}
			groups = append(groups, g)
		}
		b, err := json.MarshalIndent(groups, "", "  ")
		if err != nil {
			return err
		}
		path := filepath.Join(dir, job+".json")
		// Write then rename: Prometheus watches these files.
		if err := os.WriteFile(path+".tmp", append(b, '\n'), 0o644); err != nil {
			return err
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return nil
}
