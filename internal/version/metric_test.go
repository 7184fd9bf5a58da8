package version

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestBuildInfo(t *testing.T) {
	Version, Commit = "v1.2.3", "abc1234"
	t.Cleanup(func() { Version, Commit = "", "" })
	info := Get()
	want := `# HELP gpulab_build_info 1, labelled with the version, commit and Go release of this gpulab binary.
# TYPE gpulab_build_info gauge
gpulab_build_info{commit="abc1234",goversion="` + info.GoVersion + `",version="v1.2.3"} 1
`
	if err := testutil.CollectAndCompare(BuildInfo(), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
