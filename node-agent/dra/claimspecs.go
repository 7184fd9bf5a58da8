package dra

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// The prepared claims' specs in the CDI folder are the plugin's record of
// what it has prepared: the kubelet keeps its own checkpoint and sends a
// restarted plugin no prepare for a claim it holds prepared.

const (
	// devicesAnnotation lists, in a claim's spec, the devices it holds.
	devicesAnnotation = "gpulab.io/devices"
	// claimAnnotation names, in a claim's spec, the claim
	// (<namespace>/<name>), so that a restarted plugin can ask the API
	// server whether the claim is still there.
	claimAnnotation = "gpulab.io/claim"
	claimSpecPrefix = "gpulab-claim-"
	// staleSweepTimeout bounds the API reads of removeStaleSpecs at start.
	staleSweepTimeout = 30 * time.Second
)

func claimSpecFile(uid types.UID) string { return claimSpecPrefix + string(uid) + ".json" }

// claimSpecs reads the prepared claims' specs by claim UID, with p.mu
// held. A spec that cannot be read (corrupt, truncated by a full disk,
// edited by hand) is logged and left out: no runtime can resolve its
// devices either, and one bad file must not fail every later prepare on
// the node.
func (p *Plugin) claimSpecs() map[types.UID]*cdi.Spec {
	// The pattern is fixed and valid: Glob's only error is a bad pattern.
	files, _ := filepath.Glob(filepath.Join(p.o.CDIDir, claimSpecFile("*")))
	out := make(map[types.UID]*cdi.Spec, len(files))
	for _, f := range files {
		s, err := cdi.ReadSpec(f, 0)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// Unprepared meanwhile.
		case err != nil:
			if !p.unreadable[f] {
				p.unreadable[f] = true
				p.o.Log.Error(err, "skipping a prepared claim's CDI spec that cannot be read", "file", f)
			}
		default:
			out[types.UID(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), claimSpecPrefix), ".json"))] = s
		}
	}
	return out
}

// heldElsewhere fails when one of devices is in the spec of another
// prepared claim.
func (p *Plugin) heldElsewhere(uid types.UID, devices []string) error {
	specs := p.claimSpecs()
	for _, other := range slices.Sorted(maps.Keys(specs)) {
		if other == uid {
			continue
		}
		for _, d := range strings.Split(specs[other].Annotations[devicesAnnotation], ",") {
			if slices.Contains(devices, d) {
				return fmt.Errorf("device %s is prepared for claim %s, which has not released it", d, other)
			}
		}
	}
	return nil
}

// removeStaleSpecs removes the specs of claims that are no longer
// prepared on this node, before the plugin registers (so no prepare
// races it). The kubelet cannot be asked, so the API server decides, and
// only on proof: a spec goes when its claim is deleted, its name holds a
// claim of another UID, or it is no longer allocated from this node's
// pool; no pod can start a container with such a claim. A spec kept
// wrongly costs its GPUs until the kubelet unprepares the claim; one
// removed wrongly breaks the next container restart of a running pod.
// Kept, therefore: a spec whose claim cannot be read within
// staleSweepTimeout, one that cannot be read itself, and one without the
// claim's name (written before claimAnnotation; remove it by hand once its
// claim is gone).
func (p *Plugin) removeStaleSpecs(ctx context.Context) {
	// An API server that does not answer must not hold up registration.
	ctx, cancel := context.WithTimeout(ctx, staleSweepTimeout)
	defer cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	for uid, s := range p.claimSpecs() {
		ref := s.Annotations[claimAnnotation]
		ns, name, ok := strings.Cut(ref, "/")
		if !ok {
			p.o.Log.Info("keeping a prepared claim's CDI spec that does not name its claim", "file", s.GetPath(), "uid", uid)
			continue
		}
		why, err := p.released(ctx, uid, ns, name)
		if err != nil {
			p.o.Log.Error(err, "keeping a prepared claim's CDI spec: cannot tell whether the claim is still prepared", "file", s.GetPath(), "claim", ref)
			continue
		}
		if why == "" {
			continue
		}
		if err := os.Remove(s.GetPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			p.o.Log.Error(err, "cannot remove the CDI spec of a claim no longer prepared", "file", s.GetPath(), "claim", ref)
			continue
		}
		p.o.Log.Info("removed the CDI spec of a claim no longer prepared", "file", s.GetPath(), "claim", ref, "uid", uid, "reason", why)
	}
}

// released says why the claim uid, last seen as namespace/name, is no
// longer prepared on this node ("" while it may be).
func (p *Plugin) released(ctx context.Context, uid types.UID, namespace, name string) (string, error) {
	c, err := p.o.Kube.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "claim deleted", nil
	case err != nil:
		return "", fmt.Errorf("reading claim %s/%s: %w", namespace, name, err)
	case c.UID != uid:
		return "claim replaced by UID " + string(c.UID), nil
	case c.Status.Allocation == nil:
		return "claim deallocated", nil
	case !slices.ContainsFunc(c.Status.Allocation.Devices.Results, func(r resourceapi.DeviceRequestAllocationResult) bool {
		return r.Driver == p.o.Driver && r.Pool == p.o.Node
	}):
		return "claim allocated from another pool", nil
	}
	return "", nil
}
