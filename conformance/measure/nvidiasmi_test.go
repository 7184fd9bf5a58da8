package measure

import (
	"strings"
	"testing"
)

func TestParseNvidiaSMIL(t *testing.T) {
	out := `GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-6a708353-a26b-bce2-e87e-14d66a2ad107)
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2c88c562-874f-d508-e050-f7ecb384b575)
  MIG 1g.10gb     Device  0: (UUID: MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee)
`
	got, err := ParseNvidiaSMIL(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != "GPU-6a708353-a26b-bce2-e87e-14d66a2ad107" || got[1] != "GPU-2c88c562-874f-d508-e050-f7ecb384b575" {
		t.Errorf("parsed %v", got)
	}
}
