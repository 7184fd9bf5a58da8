package profile

import "testing"

func TestKubeRayUsesVolcano(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"/manager", "--batch-scheduler=volcano"}, true},
		{[]string{"--batch-scheduler", "volcano"}, true},
		{[]string{"-batch-scheduler=volcano"}, true},
		{[]string{"--enable-batch-scheduler"}, true},
		{[]string{"--batch-scheduler=yunikorn"}, false},
		{[]string{"--enable-batch-scheduler=false"}, false},
		{[]string{"/manager", "--leader-election-namespace=ray"}, false},
		{nil, false},
	} {
		if got := KubeRayUsesVolcano(tc.args); got != tc.want {
			t.Errorf("%q: %v, want %v", tc.args, got, tc.want)
		}
	}
}
