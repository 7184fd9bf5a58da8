// Package local runs gpulab's local testbed: a real etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler, Volcano's scheduler and
// controller-manager, and kwok playing the kubelet of fake GPU nodes, all as
// processes on loopback. No Docker, no GPU.
//
// kwokctl (binary runtime) starts, supervises and stops every process; this
// package adds what kwokctl lacks: building the binaries from the Go module
// proxy (package binaries), Volcano as kwokctl components with its CRDs and
// default queue, gpulab's CRDs, and GPU node profiles that look like real
// DGX machines to the scheduler (capacity, allocatable, GFD labels).
//
// Options.KubeRay adds KubeRay's operator as one more kwokctl component,
// with its CRDs, creating a Volcano PodGroup for every RayCluster.
//
// Several testbeds may run at once (each test package brings up its own):
// the testbed picks every port itself, below the kernel's ephemeral range and
// apart from the ports other testbeds in the cache recorded, and one bring-up
// at a time runs per cache (a lock file in <cache>/testbeds).
package local
