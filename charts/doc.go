// Package charts holds gpulab's Helm chart (gpulab/) and what Go needs to
// handle it with Helm's SDK: packaging it as `helm package` would, after the
// checks `helm lint --strict` makes, and a RESTClientGetter that lets Helm's
// actions talk to a cluster given only a rest.Config (an envtest API server,
// a testbed). The tests here render, lint and install the chart on a real
// kube-apiserver.
package charts
