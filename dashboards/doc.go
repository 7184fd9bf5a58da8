// Package dashboards builds gpulab's Grafana dashboards and checks them and
// the Prometheus rules beside them.
//
// The dashboards are defined in Go (operator.go, gangs.go, gpufleet.go,
// conformance.go) and written to grafana/*.json by `go generate` (cmd/generate);
// the JSON is what users import. cmd/generate also wraps the rule files under
// prometheus/rules into a PrometheusRule for Prometheus-Operator users.
//
// The tests prove what users get: the JSON files are current and
// schema-valid, promtool accepts the rules and their unit tests pass, the
// Prometheus-Operator monitors select what the install manifests deploy, and
// (without -short) every panel and variable query returns data from a real
// Prometheus scraping the local testbed during a small conformance run.
package dashboards

//go:generate go run ./cmd/generate
