package cli

import (
	"io"
	"strings"
	"testing"

	"github.com/gpulab/gpulab/conformance/runlock"
)

// The run lock's flags: defaults, and what is refused before a cluster is
// touched.
func TestRunLockFlags(t *testing.T) {
	o, err := ParseRun([]string{"--profile=cluster"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.LockWait != runlock.DefaultWait || o.LockNamespace != runlock.DefaultNamespace || o.AllowConcurrent {
		t.Errorf("defaults: wait %s, namespace %q, concurrent %v", o.LockWait, o.LockNamespace, o.AllowConcurrent)
	}
	o, err = ParseRun([]string{"--profile=cluster", "--lock-wait=0s", "--lock-namespace=ci", "--allow-concurrent"}, io.Discard)
	if err != nil || o.LockWait != 0 || o.LockNamespace != "ci" || !o.AllowConcurrent {
		t.Errorf("given: %+v, %v", o, err)
	}
	for _, args := range [][]string{{"--lock-wait=-1s"}, {"--lock-namespace=Not_A_Namespace"}} {
		if _, err := ParseRun(append([]string{"--profile=cluster"}, args...), io.Discard); err == nil || !strings.Contains(err.Error(), strings.Split(args[0], "=")[0]) {
			t.Errorf("%v: %v, want refused naming the flag", args, err)
		}
	}
}
