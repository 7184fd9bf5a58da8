package cli

import (
	"io"
	"strings"
	"testing"
)

// --autoscaler: auto by default, which on a testbed means none (the
// default local run asks nothing of cluster_autoscaling and starts no
// Karpenter); karpenter asks for it; values a profile cannot run are
// refused before anything starts.
func TestAutoscalerFlags(t *testing.T) {
	for _, tc := range []struct {
		args         []string
		noAutoscaler bool
		err          string
	}{
		{nil, true, ""},
		{[]string{"--autoscaler=karpenter"}, false, ""},
		{[]string{"--profile=cluster"}, false, ""},
		{[]string{"--profile=cluster", "--autoscaler=none"}, true, ""},
		{[]string{"--profile=cluster", "--autoscaler=cluster-autoscaler", "--max-new-nodes=2"}, false, ""},
		{[]string{"--autoscaler=cluster-autoscaler"}, false, "the local testbed cannot run it"},
		{[]string{"--profile=kind", "--autoscaler=karpenter"}, false, "the kind testbed runs no autoscaler"},
		{[]string{"--autoscaler=keda"}, false, "want auto, karpenter, cluster-autoscaler, none"},
		{[]string{"--max-new-nodes=-1"}, false, "must not be negative"},
		{[]string{"--nodepool=Bad_Name"}, false, "not a NodePool name"},
	} {
		o, err := ParseRun(tc.args, io.Discard)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: error %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if got := o.Ask().NoAutoscaler; got != tc.noAutoscaler {
			t.Errorf("%v: NoAutoscaler %v, want %v", tc.args, got, tc.noAutoscaler)
		}
	}
}
