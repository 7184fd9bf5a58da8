// Package e2e tests the operator on the local testbed, where a real Volcano
// binds gangs onto kwok's fake GPU nodes and a real kube-controller-manager
// garbage-collects what a deleted cluster owned.
package e2e
