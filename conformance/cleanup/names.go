package cleanup

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// MaxNameLength is a DNS-1123 label's limit: namespaces, and any name the
// run builds from its id.
const MaxNameLength = 63

// hashLength is the hex digits of the whole name kept when it is cut: 40
// bits, so two cut names collide only by a 1-in-a-trillion chance.
const hashLength = 10

// Name joins parts with "-" into a DNS-1123 label. A name over
// MaxNameLength keeps a readable start and ends in a hash of the whole
// name, so names that differ only past the cut still differ.
func Name(parts ...string) string {
	name := strings.Join(parts, "-")
	if len(name) <= MaxNameLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	head := strings.TrimRight(name[:MaxNameLength-hashLength-1], "-")
	return head + "-" + hex.EncodeToString(sum[:])[:hashLength]
}

// ScenarioNamespace names the namespace of a run's seq'th scenario of a
// feature. It holds the whole run id: two runs whose ids share their last
// segment (a-1, b-1) get different namespaces.
func ScenarioNamespace(feature string, seq int, runID string) string {
	return Name("gpulab-conformance", feature, fmt.Sprint(seq), runID)
}
