package bench

import (
	"io"
	"slices"
	"testing"
)

func TestOptionsDefaults(t *testing.T) {
	o := Options{Suite: "s", Operator: "o", Out: "d"}
	if err := o.Defaults("gpulab-x"); err != nil || o.TestbedName != "gpulab-x" || o.Log != io.Discard {
		t.Errorf("defaults = %+v, %v; want the benchmark's testbed name and a discarded log", o, err)
	}
	named := Options{Suite: "s", Operator: "o", Out: "d", TestbedName: "mine"}
	if err := named.Defaults("gpulab-x"); err != nil || named.TestbedName != "mine" {
		t.Errorf("a named testbed was renamed: %+v, %v", named, err)
	}
	for _, bad := range []Options{{Operator: "o", Out: "d"}, {Suite: "s", Out: "d"}, {Suite: "s", Operator: "o"}} {
		if err := bad.Defaults("gpulab-x"); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestScales(t *testing.T) {
	got, err := ParseScales("10, 100,300")
	if err != nil || !slices.Equal(got, []int{10, 100, 300}) {
		t.Errorf("ParseScales = %v, %v", got, err)
	}
	for _, bad := range []string{"", "10,x", "0", "10,-1", "10,,20"} {
		if got, err := ParseScales(bad); err == nil {
			t.Errorf("ParseScales(%q) = %v, accepted", bad, got)
		}
	}
	if err := CheckScales([]int{1, 5}); err != nil {
		t.Error(err)
	}
	if err := CheckScales([]int{5, 0}); err == nil {
		t.Error("a scale of 0 was accepted")
	}
}
