// Package gang builds a gang's objects from a GPUCluster's spec, exactly
// as they will be created: the pods (deterministic names, labels,
// environment, GPU requests or claims, node affinity, the scheduler's
// decoration, the template hash), the headless head Service, the DRA
// groups' ResourceClaimTemplates, the gang's sizing (package sizing) and
// its PodGroup for Volcano (scheduling.volcano.sh) or for Kubernetes' own
// gangs (scheduling.k8s.io).
//
// gpulab's operator (operator/internal/controller/gpucluster and
// operator/internal/scheduler) and the suite's no-operator floor
// (conformance/bare) both build their gangs here, so the floor measures
// the same objects the operator creates. Everything is pure and
// deterministic: what needs the cluster (capacity, a RuntimeClass's
// overhead, owner references, writes) is the caller's, passed in as
// values. Package gangtest holds a GPUCluster that exercises all of it,
// for tests that check both callers against it.
package gang
