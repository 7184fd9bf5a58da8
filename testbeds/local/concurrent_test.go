package local

import (
	"context"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestTestbedsStartTogether starts two testbeds at the same moment, as
// `make test` does from several test packages, and proves both come up with
// disjoint ports and a control plane each: each API server lists only its own
// fleet's nodes (with shared ports, one testbed's kwok-controller died on
// bind, or its API server used the other's etcd).
func TestTestbedsStartTogether(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up two local testbeds; skipped with -short")
	}
	t.Parallel()
	ctx := t.Context()
	fleets := map[string]string{"gpulab-together-a": "dgx-h100=1", "gpulab-together-b": "dgx-a100=1"}
	tbs := map[string]*Testbed{}
	for name, spec := range fleets {
		fleet, err := ParseFleet(spec)
		if err != nil {
			t.Fatal(err)
		}
		tb, err := New(Options{Name: name, Fleet: fleet, Log: testLog{t}})
		if err != nil {
			t.Fatal(err)
		}
		tbs[name] = tb
		t.Cleanup(func() {
			if err := tb.Down(context.Background()); err != nil {
				t.Errorf("%s down: %v", name, err)
			}
		})
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(tbs))
	for _, tb := range tbs {
		wg.Go(func() {
			if err := tb.Up(ctx); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("testbed up: %v", err)
	}
	if t.Failed() {
		return
	}

	owner := map[int]string{}
	for name, tb := range tbs {
		st, err := tb.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range st.Ports.all() {
			if other, taken := owner[*p]; taken {
				t.Errorf("port %d belongs to both %s and %s", *p, other, name)
			}
			owner[*p] = name
		}
		c, err := tb.Client()
		if err != nil {
			t.Fatal(err)
		}
		var nodes corev1.NodeList
		if err := c.List(ctx, &nodes); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := tb.opts.Fleet.Nodes()
		if len(nodes.Items) != len(want) || nodes.Items[0].Name != want[0].Name {
			var got []string
			for _, n := range nodes.Items {
				got = append(got, n.Name)
			}
			t.Errorf("%s's API server lists nodes %v, want only %s", name, got, want[0].Name)
		}
		for _, comp := range tb.Components() {
			if !comp.Running {
				t.Errorf("%s: %s is not running (log %s)", name, comp.Name, comp.Log)
			}
		}
	}
}
