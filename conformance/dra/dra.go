// Package dra reads a cluster's Dynamic Resource Allocation state as the
// scheduler sees it: which published devices a DeviceClass selects (its CEL
// selectors evaluated by the same library kube-scheduler uses), grouped in
// node-local pools, which devices claims hold, and whether any device is
// held by two claims at once.
package dra

import (
	"context"
	"fmt"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/internal/draclass"
)

// Device names one device the way an allocation result does.
type Device struct{ Driver, Pool, Name string }

func (d Device) String() string { return d.Driver + "/" + d.Pool + "/" + d.Name }

// Pool is one node-local pool's devices that a class selects.
type Pool = draclass.Pool

// ClassPools are the node-local pools holding devices the DeviceClass
// class selects, by the newest generation of each pool's slices, sorted
// by node. It fails when the class does not exist or a selector does not
// compile.
func ClassPools(ctx context.Context, c client.Reader, class string) ([]Pool, error) {
	var dc resourceapi.DeviceClass
	if err := c.Get(ctx, client.ObjectKey{Name: class}, &dc); err != nil {
		return nil, fmt.Errorf("reading DeviceClass %s: %w", class, err)
	}
	sel, err := draclass.Compile(&dc)
	if err != nil {
		return nil, err
	}
	var slices resourceapi.ResourceSliceList
	if err := c.List(ctx, &slices); err != nil {
		return nil, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	return sel.Pools(ctx, slices.Items)
}

// Allocated are the devices each allocated claim holds, by claim.
func Allocated(claims []resourceapi.ResourceClaim) map[types.NamespacedName][]Device {
	out := map[types.NamespacedName][]Device{}
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		k := types.NamespacedName{Namespace: c.Namespace, Name: c.Name}
		for _, r := range c.Status.Allocation.Devices.Results {
			out[k] = append(out[k], Device{Driver: r.Driver, Pool: r.Pool, Name: r.Device})
		}
	}
	return out
}

// Shared lists every device that two or more claims hold, as
// "device: claim, claim"; empty when none is.
func Shared(allocated map[types.NamespacedName][]Device) []string {
	holders := map[Device][]string{}
	for claim, devs := range allocated {
		for _, d := range devs {
			holders[d] = append(holders[d], claim.String())
		}
	}
	var out []string
	for d, hs := range holders {
		if len(hs) > 1 {
			sort.Strings(hs)
			out = append(out, d.String()+": "+strings.Join(hs, ", "))
		}
	}
	sort.Strings(out)
	return out
}

// Free are the pools' devices no claim holds.
func Free(pools []Pool, allocated map[types.NamespacedName][]Device) []Pool {
	held := map[Device]bool{}
	for _, devs := range allocated {
		for _, d := range devs {
			held[d] = true
		}
	}
	out := make([]Pool, 0, len(pools))
	for _, p := range pools {
		f := p
		f.Devices = nil
		for _, name := range p.Devices {
			if !held[Device{p.Driver, p.Name, name}] {
				f.Devices = append(f.Devices, name)
			}
		}
		out = append(out, f)
	}
	return out
}

// UUIDAttribute is the device attribute holding a GPU's UUID, as NVIDIA's
// DRA driver and gpulab's agent publish it.
const UUIDAttribute resourceapi.QualifiedName = "uuid"

// UUIDs are devs' UUIDs as their pools' newest slices publish them, in
// devs' order. A device with no UUID there is an error naming it: what a
// container sees cannot be checked against it.
func UUIDs(slices []resourceapi.ResourceSlice, devs []Device) ([]string, error) {
	type published struct {
		uuid       string
		generation int64
	}
	by := map[Device]published{}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			k := Device{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name, Name: d.Name}
			a, ok := d.Attributes[UUIDAttribute]
			if !ok || a.StringValue == nil {
				continue
			}
			if p, seen := by[k]; !seen || s.Spec.Pool.Generation > p.generation {
				by[k] = published{*a.StringValue, s.Spec.Pool.Generation}
			}
		}
	}
	out := make([]string, 0, len(devs))
	for _, d := range devs {
		p, ok := by[d]
		if !ok {
			return nil, fmt.Errorf("device %s: no ResourceSlice publishes its %s attribute", d, UUIDAttribute)
		}
		out = append(out, p.uuid)
	}
	return out, nil
}
