// Package binaries builds the testbeds' third-party programs (etcd, the
// Kubernetes control plane, kwok, Volcano, KubeRay's operator, Karpenter's
// kwok provider; the local testbed runs them, envtest takes etcd and the
// API server, kind's node image its own parts) and
// the Prometheus tools the dashboards are checked with (Prometheus,
// promtool, the Pushgateway) from the Go module proxy, because no download
// site is reachable from where gpulab runs.
//
// Each component is built once into <cache>/bin/<component>-<version>/ and
// reused until its version changes. Volcano and KubeRay's operator are
// built at the version Options choose (VolcanoVersions, KubeRayVersions;
// DefaultVolcanoVersion and DefaultKubeRayVersion unless told), so
// several versions coexist in one cache. A build writes into a temporary folder
// that is renamed into place only when every binary of the component is
// built, so an interrupted build never leaves a half-built set behind; a
// lock file in <cache>/bin keeps two processes from building at once.
package binaries
