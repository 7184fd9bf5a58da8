package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/node-agent/dra"
	"github.com/gpulab/gpulab/node-agent/internal/agent"
	"github.com/gpulab/gpulab/node-agent/internal/nvml"
)

const inventoryUsage = `usage: gpulab-agent inventory [-o json|yaml|table|resourceslice] [flags]

Reads this node's GPUs once over NVML, prints them as a GPUInventory and exits.
It needs no Kubernetes. -o resourceslice prints, in YAML, the ResourceSlice of
gpu.gpulab.io devices Dynamic Resource Allocation would be offered for them.

flags:
`

func inventoryMain(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gpulab-agent inventory", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c common
	c.register(fs)
	var output string
	fs.StringVar(&output, "o", "table", "output format: json, yaml, table or resourceslice")
	fs.StringVar(&output, "output", "table", "output format: json, yaml, table or resourceslice")
	fs.Usage = func() { fmt.Fprint(stderr, inventoryUsage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	err := c.validate(false)
	if output != "json" && output != "yaml" && output != "table" && output != "resourceslice" {
		err = errors.Join(err, fmt.Errorf("-o=%q: want json, yaml, table or resourceslice", output))
	}
	if fs.NArg() > 0 {
		err = errors.Join(err, fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if err != nil {
		fmt.Fprintln(stderr, "gpulab-agent inventory:", err)
		return ExitUsage
	}
	if c.nodeName == "" {
		c.nodeName, _ = os.Hostname()
	}
	b, err := openBackend(c.backend, c.nodeName)
	if err != nil {
		fmt.Fprintln(stderr, "gpulab-agent inventory:", err)
		return ExitError
	}
	a, err := agent.New(b, agent.Options{NodeName: c.nodeName, IgnoredXIDs: c.ignored, AllowNoGPU: c.allowNoGPU})
	if err == nil {
		var inv *v1alpha1.GPUInventory
		if inv, err = a.Inventory(); err == nil {
			err = printInventory(stdout, inv, output)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "gpulab-agent inventory:", err)
		if errors.Is(err, nvml.ErrNoDriver) {
			return ExitNoDriver
		}
		return ExitError
	}
	return ExitOK
}

func printInventory(w io.Writer, inv *v1alpha1.GPUInventory, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(inv)
	case "yaml":
		return printYAML(w, inv)
	case "resourceslice":
		return printYAML(w, resourceSlice(inv))
	}
	st := &inv.Status
	fmt.Fprintf(w, "Node: %s  Driver: %s  CUDA: %s  NVML: %s\n", inv.Name, orDash(st.DriverVersion), orDash(st.CUDADriverVersion), orDash(st.NVMLVersion))
	fmt.Fprintf(w, "GPUs: %d  Healthy: %d  Product: %s  Memory: %d MiB\n\n", st.Summary.Count, st.Summary.Healthy, orDash(st.Summary.Product), st.Summary.MemoryMiB)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tUUID\tPRODUCT\tMEMORY(MiB)\tCC\tARCH\tPCI BUS ID\tMIG\tFABRIC\tHEALTH")
	for _, g := range st.GPUs {
		mig, fabric := "-", "-"
		if g.MIG != nil {
			mig = g.MIG.Current
			if g.MIG.Pending != g.MIG.Current {
				mig += "→" + g.MIG.Pending
			}
			if n := len(g.MIG.Devices); n > 0 {
				mig += fmt.Sprintf(" (%d)", n)
			}
		}
		if g.Fabric != nil {
			fabric = g.Fabric.State
		}
		h := string(g.Health.State)
		if g.Health.Reason != "" {
			h += " (" + g.Health.Reason + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", g.Index, orDash(g.UUID), orDash(g.Product), g.MemoryMiB,
			orDash(g.ComputeCapability), orDash(g.Architecture), orDash(g.PCIBusID), mig, fabric, h)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, g := range st.GPUs {
		if len(g.Errors) > 0 {
			fmt.Fprintf(w, "\nGPU %d errors: %s", g.Index, strings.Join(g.Errors, "; "))
		}
	}
	for _, c := range st.Conditions {
		if c.Status != "True" {
			fmt.Fprintf(w, "\n%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	return nil
}

func printYAML(w io.Writer, obj any) error {
	b, err := yaml.Marshal(obj)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// resourceSlice is the one slice of the node's pool, as the DRA publisher
// writes it, so an operator can read on a real GPU machine what claims'
// CEL selectors would see.
func resourceSlice(inv *v1alpha1.GPUInventory) *resourceapi.ResourceSlice {
	node := inv.Name
	return &resourceapi.ResourceSlice{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + dra.DefaultDriverName},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   dra.DefaultDriverName,
			Pool:     resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			NodeName: &node,
			Devices:  dra.Devices(&inv.Status),
		},
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
