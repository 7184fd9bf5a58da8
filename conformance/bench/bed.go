package bench

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/gpulab/gpulab/conformance/profile"
	"github.com/gpulab/gpulab/testbeds/local"
)

// DefaultOperatorName names the operator a Bed runs, its log
// <LogDir>/<name>.log and its row in the CPU tables.
const DefaultOperatorName = "gpulab-operator"

// BedOptions declare one benchmark's testbed and operator.
type BedOptions struct {
	// Scale is the gang count the testbed's fleet is sized for
	// (profile.LocalFleet) and each run's --scale (required, at least 1).
	Scale int
	// Testbed is the local testbed: what the benchmark adds (KubeRay, a
	// Volcano version, native gangs, ReadyTimeout). Up sets Log to
	// Options.Log and, where they are empty, Name to Options.TestbedName
	// and Fleet to the one sized for Scale.
	Testbed local.Options
	// Operator is gpulab's operator, run against the testbed as its sole
	// replica (no leader election: a saturated API server can answer a
	// Lease renewal past its deadline, and a leader that cannot renew
	// exits; throughput, not failover, is measured). LogDir is required
	// and created; Up sets Binary to Options.Operator, Kubeconfig to the
	// testbed's and, where empty, Name to DefaultOperatorName.
	Operator profile.OperatorOptions
	// Identity is who the operator is to the API server: one of
	// Identities; "" is IdentityAdmin.
	Identity string
}

// Bed is a local testbed a benchmark brought up and the operator it runs
// against it.
type Bed struct {
	Testbed *local.Testbed
	// Operator is nil on a Bed that Up did not make.
	Operator *profile.OperatorProcess
	// Scale is the gang count the bed was sized for, and Nodes its fleet's
	// nodes.
	Scale, Nodes int
	opts         Options
}

// Up brings up the testbed of bed and starts its operator; Down takes
// both away. It tears down what it brought up when it fails.
func (o Options) Up(ctx context.Context, bed BedOptions) (*Bed, error) {
	if bed.Scale < 1 {
		return nil, fmt.Errorf("a testbed is sized for at least 1 gang, got %d", bed.Scale)
	}
	if bed.Operator.LogDir == "" {
		return nil, errors.New("the operator's log directory is required")
	}
	if err := CheckIdentity(bed.Identity); err != nil {
		return nil, err
	}
	tbOpts := bed.Testbed
	if tbOpts.Name == "" {
		tbOpts.Name = o.TestbedName
	}
	if tbOpts.Fleet == nil {
		fleet, err := profile.LocalFleet(profile.Options{Scale: bed.Scale})
		if err != nil {
			return nil, fmt.Errorf("sizing the fleet for %d gangs: %w", bed.Scale, err)
		}
		tbOpts.Fleet = fleet
	}
	tbOpts.Log = o.Log
	tb, err := local.New(tbOpts)
	if err != nil {
		return nil, fmt.Errorf("testbed %s: %w", tbOpts.Name, err)
	}
	if err := tb.Up(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("bringing up testbed %s: %w", tb.Name(), err), tb.Down(context.WithoutCancel(ctx)))
	}
	b := &Bed{Testbed: tb, Scale: bed.Scale, Nodes: len(tbOpts.Fleet.Nodes()), opts: o}
	opOpts := bed.Operator
	if opOpts.Name == "" {
		opOpts.Name = DefaultOperatorName
	}
	opOpts.Binary, opOpts.SoleReplica = o.Operator, true
	if err := os.MkdirAll(opOpts.LogDir, 0o755); err != nil {
		return nil, errors.Join(fmt.Errorf("the operator's log directory: %w", err), b.Down(ctx))
	}
	if opOpts.Kubeconfig, err = operatorKubeconfig(ctx, tb, bed.Identity, opOpts.LogDir); err != nil {
		return nil, errors.Join(fmt.Errorf("the operator as %s on testbed %s: %w", bed.Identity, tb.Name(), err), b.Down(ctx))
	}
	if b.Operator, err = profile.StartOperator(ctx, opOpts); err != nil {
		return nil, errors.Join(fmt.Errorf("starting %s on testbed %s: %w", opOpts.Name, tb.Name(), err), b.Down(ctx))
	}
	return b, nil
}

// Down stops the operator and tears the testbed down, even when ctx has
// ended.
func (b *Bed) Down(ctx context.Context) error {
	var errs []error
	if b.Operator != nil {
		if err := b.Operator.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping %s: %w", b.Operator.Name, err))
		}
	}
	if err := b.Testbed.Down(context.WithoutCancel(ctx)); err != nil {
		errs = append(errs, fmt.Errorf("tearing down testbed %s: %w", b.Testbed.Name(), err))
	}
	return errors.Join(errs...)
}

// Processes maps the bed's processes to their pids: the operator, under
// its name, and every testbed component running now.
func (b *Bed) Processes() map[string]int {
	procs := map[string]int{}
	if b.Operator != nil {
		procs[b.Operator.Name] = b.Operator.PID()
	}
	for _, c := range b.Testbed.Components() {
		if c.Running {
			procs[c.Name] = c.PID
		}
	}
	return procs
}
