package profile

import (
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// fakeOperatorEnv makes this test binary stand in for gpulab-operator.
const fakeOperatorEnv = "GPULAB_FAKE_OPERATOR"

func TestMain(m *testing.M) {
	if os.Getenv(fakeOperatorEnv) == "1" {
		fakeOperator()
		return
	}
	os.Exit(m.Run())
}

// fakeOperator prints its arguments and answers /readyz on the probe
// address it was given until it is killed.
func fakeOperator() {
	fmt.Println(strings.Join(os.Args[1:], " "))
	var addr string
	for _, a := range os.Args[1:] {
		if v, ok := strings.CutPrefix(a, "--health-probe-bind-address="); ok {
			addr = v
		}
	}
	http.HandleFunc("/readyz", func(http.ResponseWriter, *http.Request) {})
	fmt.Fprintln(os.Stderr, http.ListenAndServe(addr, nil))
	os.Exit(1)
}

// TestStartOperatorSoleReplica: a benchmark's sole replica runs without
// leader election, the profile's replicas with it; Exited is nil while the
// process runs and names its log once it has gone.
func TestStartOperatorSoleReplica(t *testing.T) {
	for _, sole := range []bool{false, true} {
		t.Run("sole="+strconv.FormatBool(sole), func(t *testing.T) {
			op, err := StartOperator(t.Context(), OperatorOptions{Name: "fake", Binary: os.Args[0], Kubeconfig: "unused",
				LogDir: t.TempDir(), Env: []string{fakeOperatorEnv + "=1"}, SoleReplica: sole})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = op.Kill() })
			if err := op.Exited(); err != nil {
				t.Fatalf("Exited while running: %v", err)
			}
			log, err := os.ReadFile(op.Log())
			if err != nil {
				t.Fatal(err)
			}
			want := "--leader-elect=" + strconv.FormatBool(!sole)
			if args := strings.Fields(string(log)); !slices.Contains(args, want) {
				t.Errorf("arguments %q lack %s", args, want)
			}
			if err := op.Kill(); err != nil {
				t.Fatal(err)
			}
			if err := op.Exited(); err == nil || !strings.Contains(err.Error(), op.Log()) {
				t.Errorf("Exited after a kill = %v, want an error naming the log %s", err, op.Log())
			}
		})
	}
}
