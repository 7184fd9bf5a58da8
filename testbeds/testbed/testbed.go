// Package testbed is what every cluster the suite and the benchmarks run on
// has in common: the local testbed (testbeds/local), a kind cluster
// (testbeds/kind) and an existing cluster known by its kubeconfig
// (Existing). It imports no testbed; each implementation asserts it
// satisfies Testbed in its own package. What only one kind has (the local
// testbed's processes and ports, kind's node image) stays on its own type,
// reached by a type assertion where it is needed.
package testbed

import "context"

// Testbed is a cluster that can be brought up, waited for and taken down.
// A client is built from Kubeconfig: the implementations' own Client
// methods return different client types.
type Testbed interface {
	// Name names the cluster.
	Name() string
	// Kubeconfig is the path of its kubeconfig ("" for an Existing
	// cluster read from the default loading rules or a pod's own config).
	Kubeconfig() string
	// Up creates the cluster and installs what it runs, and returns once
	// it is ready.
	Up(ctx context.Context) error
	// Down takes away what Up made.
	Down(ctx context.Context) error
	// WaitReady returns once the cluster is ready, or fails when it does
	// not become so within the implementation's own timeout.
	WaitReady(ctx context.Context) error
}

// Existing is a cluster someone else runs (--profile=cluster). Up, Down
// and WaitReady do nothing: tearing it down never deletes anything of its
// owner's, and what it must serve is checked by the suite's preflight.
type Existing struct {
	// ClusterName is the kubeconfig context's name ("in-cluster" for a
	// pod's own config).
	ClusterName string
	// Path is the kubeconfig's path: "" for the default loading rules.
	Path string
}

var _ Testbed = Existing{}

// Name is the cluster's context name.
func (e Existing) Name() string { return e.ClusterName }

// Kubeconfig is the kubeconfig's path.
func (e Existing) Kubeconfig() string { return e.Path }

// Up does nothing: the cluster is already there.
func (Existing) Up(context.Context) error { return nil }

// Down does nothing: the cluster is not ours to take down.
func (Existing) Down(context.Context) error { return nil }

// WaitReady does nothing: the preflight checks the cluster.
func (Existing) WaitReady(context.Context) error { return nil }
