package conformance

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpulab/gpulab/conformance/dra"
	"github.com/gpulab/gpulab/conformance/results"
)

// claimWatch follows every ResourceClaim from setup to teardown where the
// cluster serves resource.k8s.io/v1, so that a device allocated to two
// claims at once is caught between the features' own snapshots too
// (nil where DRA is not served). Guarded by mu after setup.
var (
	claimWatch *dra.Watch
	claimMarks = map[string]dra.Mark{} // by feature, at its start
)

// devicesNeverShared is the assessment each feature that saw claims
// allocated gets from the whole-run watch.
const devicesNeverShared = "no device was allocated to two claims at once (every ResourceClaim watched)"

func startClaimWatch(ctx context.Context) error {
	_, err := cluster.Client.RESTMapper().RESTMapping(schema.GroupKind{Group: "resource.k8s.io", Kind: "ResourceClaim"}, "v1")
	if meta.IsNoMatchError(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("resource.k8s.io/v1: %w", err)
	}
	w, err := dra.StartWatch(ctx, cluster.Config)
	if err != nil {
		return err
	}
	claimWatch = w
	return nil
}

// markClaims notes where the watch stood as a feature starts. Callers
// hold mu.
func markClaims(feature string) {
	if claimWatch != nil {
		claimMarks[feature] = claimWatch.Mark()
	}
}

// claimsVerdict is the feature's devicesNeverShared assessment, when the
// watch saw claims allocated during it. Callers hold mu.
func claimsVerdict(feature string, started time.Time) (results.Assessment, bool) {
	mark, ok := claimMarks[feature]
	if claimWatch == nil || !ok {
		return results.Assessment{}, false
	}
	n, shared := claimWatch.Since(mark)
	if n == 0 {
		return results.Assessment{}, false
	}
	a := results.Assessment{Name: devicesNeverShared, Requirement: results.RequirementDRASupport, Status: results.StatusPassed,
		Seconds: time.Since(started).Seconds()}
	if len(shared) > 0 {
		a.Status, a.Reason, a.Messages = results.StatusFailed, shared[0], shared
	}
	return a, true
}
