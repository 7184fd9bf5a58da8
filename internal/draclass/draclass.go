// Package draclass decides which published devices a DeviceClass selects,
// as kube-scheduler's allocator decides it: the class's CEL selectors
// evaluated by k8s.io/dynamic-resource-allocation's own library, over the
// newest generation of each node-local pool's ResourceSlices. The operator
// counts capacity with it, the conformance suite checks claims with it.
package draclass

import (
	"context"
	"fmt"
	"sort"

	resourceapi "k8s.io/api/resource/v1"
	draCEL "k8s.io/dynamic-resource-allocation/cel"
)

// Pool is one node-local pool's devices that a class selects.
type Pool struct {
	Driver, Name, Node string
	// Devices are the selected devices' names, sorted.
	Devices []string
}

// Class is a DeviceClass's compiled selectors.
type Class struct {
	name  string
	progs []draCEL.CompilationResult
}

// Compile compiles dc's CEL selectors; it fails on one that does not
// compile.
func Compile(dc *resourceapi.DeviceClass) (*Class, error) {
	c := &Class{name: dc.Name}
	for _, s := range dc.Spec.Selectors {
		if s.CEL == nil {
			continue
		}
		r := draCEL.GetCompiler(draCEL.Features{}).CompileCELExpression(s.CEL.Expression, draCEL.Options{})
		if r.Error != nil {
			return nil, fmt.Errorf("DeviceClass %s: selector %q: %w", dc.Name, s.CEL.Expression, r.Error)
		}
		c.progs = append(c.progs, r)
	}
	return c, nil
}

// Pools are the node-local pools of slices holding devices the class
// selects, by the newest generation of each pool, sorted by node. A
// selector that fails on a device (a missing attribute it does not guard
// against) is an error, as it is for the allocator.
func (c *Class) Pools(ctx context.Context, slices []resourceapi.ResourceSlice) ([]Pool, error) {
	type key struct{ driver, pool string }
	newest := map[key]int64{}
	for _, s := range slices {
		k := key{s.Spec.Driver, s.Spec.Pool.Name}
		newest[k] = max(newest[k], s.Spec.Pool.Generation)
	}
	pools := map[key]*Pool{}
	for _, s := range slices {
		k := key{s.Spec.Driver, s.Spec.Pool.Name}
		if s.Spec.NodeName == nil || s.Spec.Pool.Generation != newest[k] {
			continue
		}
		for _, d := range s.Spec.Devices {
			ok, err := c.matches(ctx, s.Spec.Driver, d)
			if err != nil {
				return nil, fmt.Errorf("DeviceClass %s on %s/%s/%s: %w", c.name, s.Spec.Driver, s.Spec.Pool.Name, d.Name, err)
			}
			if !ok {
				continue
			}
			p := pools[k]
			if p == nil {
				p = &Pool{Driver: k.driver, Name: k.pool, Node: *s.Spec.NodeName}
				pools[k] = p
			}
			p.Devices = append(p.Devices, d.Name)
		}
	}
	out := make([]Pool, 0, len(pools))
	for _, p := range pools {
		sort.Strings(p.Devices)
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node+out[i].Name < out[j].Node+out[j].Name })
	return out, nil
}

// matches says whether every selector selects d.
func (c *Class) matches(ctx context.Context, driver string, d resourceapi.Device) (bool, error) {
	for _, p := range c.progs {
		ok, _, err := p.DeviceMatches(ctx, draCEL.Device{Driver: driver, Attributes: d.Attributes, Capacity: d.Capacity})
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// PerNode counts the devices pools hold on each node.
func PerNode(pools []Pool) map[string]int32 {
	out := map[string]int32{}
	for _, p := range pools {
		out[p.Node] += int32(len(p.Devices))
	}
	return out
}
