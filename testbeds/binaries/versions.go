package binaries

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"golang.org/x/mod/semver"
)

// Environment variables that choose Volcano's and KubeRay's versions when
// Options (or local.Options) leave them empty; the Makefile sets them from
// VOLCANO_VERSION and KUBERAY_VERSION.
const (
	VolcanoVersionEnv = "GPULAB_VOLCANO_VERSION"
	KubeRayVersionEnv = "GPULAB_KUBERAY_VERSION"
)

// ErrUnknownVersion is returned for a Volcano or KubeRay version the
// testbed does not know how to build.
var ErrUnknownVersion = errors.New("unsupported version")

// VolcanoVersions are the Volcano versions the testbed builds, oldest first.
func VolcanoVersions() []string { return sortedVersions(volcanoReleases) }

// KubeRayVersions are the KubeRay operator versions the testbed builds,
// oldest first.
func KubeRayVersions() []string { return sortedVersions(kuberayReleases) }

// ResolveVolcanoVersion returns version, or when it is empty
// $GPULAB_VOLCANO_VERSION, else DefaultVolcanoVersion; an error wrapping
// ErrUnknownVersion if that is not one of VolcanoVersions.
func ResolveVolcanoVersion(version string) (string, error) {
	return resolveVersion("Volcano", version, VolcanoVersionEnv, DefaultVolcanoVersion, volcanoReleases, volcanoUnbuildable)
}

// ResolveKubeRayVersion is ResolveVolcanoVersion for KubeRay's operator
// ($GPULAB_KUBERAY_VERSION, DefaultKubeRayVersion, KubeRayVersions).
func ResolveKubeRayVersion(version string) (string, error) {
	return resolveVersion("KubeRay", version, KubeRayVersionEnv, DefaultKubeRayVersion, kuberayReleases, kuberayUnbuildable)
}

func resolveVersion[R any](what, version, env, def string, known map[string]R, unbuildable map[string]string) (string, error) {
	source := ""
	if version == "" {
		version, source = os.Getenv(env), " (from $"+env+")"
	}
	if version == "" {
		return def, nil
	}
	if _, ok := known[version]; ok {
		return version, nil
	}
	why := ""
	if reason, ok := unbuildable[version]; ok {
		why = ": " + reason
	}
	return "", fmt.Errorf("%w: %s %q%s is not one the testbed builds (%s)%s",
		ErrUnknownVersion, what, version, source, strings.Join(sortedVersions(known), ", "), why)
}

// sortedVersions orders by semver, and a release's rebuilds (build
// metadata, which semver ignores) after it by name.
func sortedVersions[R any](releases map[string]R) []string {
	return slices.SortedFunc(maps.Keys(releases), func(a, b string) int {
		return cmp.Or(semver.Compare(a, b), strings.Compare(a, b))
	})
}

// KarpenterVersion is the sigs.k8s.io/karpenter release whose kwok provider
// (sigs.k8s.io/karpenter/kwok) a testbed runs with --autoscaler=karpenter;
// its CRDs are read from the same module version. Its go.mod asks for Go
// 1.26.9, newer than this repository's, so it alone builds with
// KarpenterGoToolchain.
const (
	KarpenterVersion     = "v1.15.0"
	KarpenterGoToolchain = "go1.27.3"
)
