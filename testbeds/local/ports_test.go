package local

import (
	"net"
	"path/filepath"
	"strconv"
	"testing"
)

// TestAllocatePortsSkipsReservedAndBound proves a testbed's ports are
// distinct, below the ephemeral range, and never one that another testbed
// recorded (listening or not, as during a restart) or that something else
// listens on.
func TestAllocatePortsSkipsReservedAndBound(t *testing.T) {
	dir := t.TempDir()
	start := portsTop() - 1
	first, err := allocatePortsFrom(dir, start)
	if err != nil {
		t.Fatal(err)
	}
	checkPorts(t, first)
	if err := writePorts(filepath.Join(dir, "first"), first); err != nil {
		t.Fatal(err)
	}

	// Something else listens just below the first testbed's ports.
	lowest := start
	for _, p := range first.all() {
		lowest = min(lowest, *p)
	}
	busy := lowest - 1
	if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(busy))); err == nil {
		defer l.Close()
	}

	// The same start: the scan meets the first testbed's ports and busy first.
	second, err := allocatePortsFrom(dir, start)
	if err != nil {
		t.Fatal(err)
	}
	checkPorts(t, second)
	taken := map[int]bool{busy: true}
	for _, p := range first.all() {
		taken[*p] = true
	}
	for _, p := range second.all() {
		if taken[*p] {
			t.Errorf("second testbed got port %d, already taken (first testbed %+v, busy %d)", *p, first, busy)
		}
	}

	// The scan wraps around the bottom of the range.
	wrapped, err := allocatePortsFrom(t.TempDir(), lowestPort+2)
	if err != nil {
		t.Fatal(err)
	}
	checkPorts(t, wrapped)

	random, err := allocatePorts(dir)
	if err != nil {
		t.Fatal(err)
	}
	checkPorts(t, random)
	for _, p := range random.all() {
		if taken[*p] {
			t.Errorf("random scan got port %d of the first testbed", *p)
		}
	}
}

func checkPorts(t *testing.T, p Ports) {
	t.Helper()
	seen := map[int]bool{}
	for _, port := range p.all() {
		if *port < lowestPort || *port >= portsTop() {
			t.Errorf("port %d outside [%d, %d)", *port, lowestPort, portsTop())
		}
		if seen[*port] {
			t.Errorf("port %d picked twice in %+v", *port, p)
		}
		seen[*port] = true
	}
}
