package dra

import (
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func claim(name string, devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: name, UID: types.UID("uid-" + name)}}
	if len(devices) > 0 {
		c.Status.Allocation = &resourceapi.AllocationResult{}
		c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name + "-pod", UID: types.UID("pod-" + name)}}
		for _, d := range devices {
			c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
				resourceapi.DeviceRequestAllocationResult{Request: "gpus", Driver: "gpu.gpulab.io", Pool: "node-1", Device: d})
		}
	}
	return c
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestWatchSharing(t *testing.T) {
	w := NewWatch()
	start := w.Mark()
	w.Observe(claim("a"), false) // created, not yet allocated
	w.Observe(claim("a", "gpu-0", "gpu-1"), false)
	w.Observe(claim("a", "gpu-0", "gpu-1"), false) // an unrelated update
	w.Observe(claim("b", "gpu-2"), false)
	if n, shared := w.Since(start); n != 2 || len(shared) != 0 {
		t.Fatalf("disjoint claims: %d allocations, shared %v", n, shared)
	}

	// a's pod is deleted: its devices go to c, first by deallocation, then
	// by deletion of a claim that still held them.
	w.Observe(claim("a"), false)
	w.Observe(claim("c", "gpu-0"), false)
	w.Observe(claim("b", "gpu-2"), true)
	w.Observe(claim("d", "gpu-2", "gpu-3"), false)
	mid := w.Mark()
	if n, shared := w.Since(start); n != 4 || len(shared) != 0 {
		t.Fatalf("released devices reused: %d allocations, shared %v", n, shared)
	}

	// e is handed gpu-3 while d holds it.
	w.Observe(claim("e", "gpu-3"), false)
	n, shared := w.Since(mid)
	if n != 1 || len(shared) != 1 || !strings.Contains(shared[0], "gpu.gpulab.io/node-1/gpu-3 allocated to claim n/e (for pod e-pod) while claim n/d (for pod d-pod) held it. History: ") {
		t.Fatalf("a device held twice: %d allocations, shared %v", n, shared)
	}
	// A claim being deleted still holds its devices until it is gone.
	g := claim("g", "gpu-5")
	w.Observe(g, false)
	g.DeletionTimestamp = &metav1.Time{Time: t0}
	w.Observe(g, false)
	w.Observe(claim("h", "gpu-5"), false)
	if _, shared := w.Since(mid); len(shared) != 2 || !strings.Contains(shared[1], "claim n/h (for pod h-pod) while claim n/g (for pod g-pod) held it (being deleted since 2026-01-01T00:00:00Z") {
		t.Fatalf("h took gpu-5 while g, being deleted, held it: %v", shared)
	}
	mid = w.Mark()

	// Reserved for no pod (its pod gone) is still allocated, and said so.
	i := claim("i", "gpu-6")
	i.Status.ReservedFor = nil // allocated first, reserved next
	w.Observe(i, false)
	i.Status.ReservedFor = claim("i", "gpu-6").Status.ReservedFor
	w.Observe(i, false)
	i.Status.ReservedFor = nil
	w.Observe(i, false)
	w.Observe(claim("j", "gpu-6"), false)
	if _, shared := w.Since(mid); len(shared) != 1 || !strings.Contains(shared[0], "claim n/j (for pod j-pod) while claim n/i (for pod i-pod) held it (no longer reserved for a pod, still allocated)") {
		t.Fatalf("j took gpu-6 from i, reserved for no pod: %v", shared)
	}
	mid = w.Mark()

	// Once d is gone, e still holds gpu-3: f taking it is sharing with e.
	w.Observe(claim("d"), true)
	w.Observe(claim("f", "gpu-3"), false)
	if _, shared := w.Since(mid); len(shared) != 1 || !strings.Contains(shared[0], "claim n/f (for pod f-pod) while claim n/e (for pod e-pod) held it") {
		t.Errorf("f took gpu-3 while e held it: %v", shared)
	}

	// Two devices taken from one claim are one record.
	mid = w.Mark()
	w.Observe(claim("m", "gpu-8", "gpu-9"), false)
	w.Observe(claim("n", "gpu-8", "gpu-9"), false)
	if _, shared := w.Since(mid); len(shared) != 1 || !strings.HasPrefix(shared[0],
		"devices gpu.gpulab.io/node-1/gpu-8, gpu.gpulab.io/node-1/gpu-9 allocated to claim n/n (for pod n-pod) while claim n/m (for pod m-pod) held them. History: ") {
		t.Errorf("n took m's two devices: %v", shared)
	}

	// The evidence of e and d's sharing, read now, tells how it ended:
	// both claims' changes, d's deletion last, unrelated updates left out.
	_, shared = w.Since(start)
	_, history, found := strings.Cut(shared[0], "History: ")
	if !found {
		t.Fatalf("no history in %q", shared[0])
	}
	for _, want := range []string{"n/e: +", "allocated node-1/gpu-3, reserved (for pod e-pod)", " | n/d: +", "allocated node-1/gpu-2,node-1/gpu-3, reserved (for pod d-pod); +", " deleted"} {
		if !strings.Contains(history, want) {
			t.Errorf("the history %q lacks %q", history, want)
		}
	}
	if strings.Count(history, "; ") != 1 || !strings.HasSuffix(history, "deleted") {
		t.Errorf("the history %q: want e's one change, then d's allocation and its deletion", history)
	}
}
