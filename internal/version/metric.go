package version

import "github.com/prometheus/client_golang/prometheus"

// BuildInfo is the gpulab_build_info gauge, 1 with the build's version,
// commit and Go release as labels, so dashboards and alerts can tell which
// build each replica runs (as kube-state-metrics and Prometheus do for
// theirs).
func BuildInfo() prometheus.Collector {
	info := Get()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gpulab_build_info",
		Help: "1, labelled with the version, commit and Go release of this gpulab binary.",
	}, []string{"version", "commit", "goversion"})
	g.WithLabelValues(info.Version, info.Commit, info.GoVersion).Set(1)
	return g
}
