// Package dashboards builds gpulab's Grafana dashboards and checks them and
// the Prometheus rules beside them.
//
// The dashboards are defined in Go with Grafana's own builders
// (grafana-foundation-sdk: operator.go, gangs.go, gpufleet.go, agents.go,
// conformance.go) and written to grafana/*.json by `go generate`
// (cmd/generate); the JSON is what users import. cmd/generate also wraps the
// rule files under prometheus/rules into a PrometheusRule for
// Prometheus-Operator users, writes the dashboards as ConfigMaps for
// Grafana's dashboard sidecar, and copies dashboards and rules into the Helm
// chart (charts/gpulab), which can read only its own files.
//
// The tests prove what users get: the JSON files are current and
// schema-valid, promtool accepts the rules and their unit tests pass, the
// Prometheus-Operator monitors select what the install manifests deploy, and
// (without -short) every panel and variable query returns data from a real
// Prometheus scraping the local testbed during a small conformance run, and
// a recorded DCGM exporter page for the GPU-fleet dashboard's other source.
package dashboards

//go:generate go run ./cmd/generate
