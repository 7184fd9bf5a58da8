package kind

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/gpulab/gpulab/internal/manifest"
	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/kind/images"
	"github.com/gpulab/gpulab/testbeds/kind/internal/command"
	"github.com/gpulab/gpulab/testbeds/kind/nodeimage"
)

// GPULabImages are gpulab's images on kind, as the overlays under
// testbeds/kind name them; VersionedRef adds the VERSION tag too.
const (
	OperatorImage = "gpulab-operator:dev"
	AgentImage    = "gpulab-agent:dev"
	// WorkloadImage runs `sleep infinity` (or the command given): the
	// suite's default --image and --submitter-image on kind.
	WorkloadImage = "gpulab-workload:dev"
)

// VolcanoSchedulerImage and VolcanoControllerImage are Volcano's images,
// built from the binaries the local testbed builds and tagged with their
// version, so that the versions' images coexist.
func VolcanoSchedulerImage(version string) string {
	return "gpulab-volcano/vc-scheduler:" + imageTag(version)
}

// imageTag is a version as an image tag, which cannot hold semver's "+"
// (v1.14.1+k8s.1.34.4 is tagged v1.14.1_k8s.1.34.4).
func imageTag(version string) string { return strings.ReplaceAll(version, "+", "_") }

// VolcanoControllerImage is the controller manager's image, tagged as
// VolcanoSchedulerImage is.
func VolcanoControllerImage(version string) string {
	return "gpulab-volcano/vc-controller-manager:" + imageTag(version)
}

// gpulabRecipes are the images of the workloads the testbed installs:
// the operator (static, FROM scratch, non-root as in its Dockerfile), the
// agent (cgo: glibc from the node's Debian base), Volcano's scheduler and
// controllers (static).
func gpulabRecipes(operator, agent string, set *binaries.Set, base string) []images.Recipe {
	return []images.Recipe{
		// The suite's workload pods and GPUJob submitters: the Debian base
		// has sleep and sh, so a pod runs a process, not only a sandbox.
		{Ref: WorkloadImage, Base: base, Entrypoint: []string{"sleep", "infinity"}},
		{Ref: OperatorImage, Base: "scratch", Files: map[string]string{"/gpulab-operator": operator},
			Entrypoint: []string{"/gpulab-operator"}, User: "65532:65532"},
		{Ref: AgentImage, Base: base, Files: map[string]string{"/usr/local/bin/gpulab-agent": agent},
			Entrypoint: []string{"/usr/local/bin/gpulab-agent"}},
		{Ref: VolcanoSchedulerImage(set.VolcanoVersion), Base: "scratch", Files: map[string]string{"/vc-scheduler": set.VolcanoScheduler},
			Entrypoint: []string{"/vc-scheduler"}},
		{Ref: VolcanoControllerImage(set.VolcanoVersion), Base: "scratch", Files: map[string]string{"/vc-controller-manager": set.VolcanoControllerManager},
			Entrypoint: []string{"/vc-controller-manager"}},
	}
}

// Install builds gpulab's and Volcano's images, loads them into the nodes
// with kind's loader and installs Volcano (Options.VolcanoVersion, from its
// module's manifest, without its admission webhook, as on the local
// testbed), the default queue, the operator and the agent.
func (c *Cluster) Install(ctx context.Context) error {
	start := time.Now()
	set, err := binaries.Ensure(ctx, binaries.Options{CacheDir: c.opts.CacheDir, Log: c.opts.Log, VolcanoVersion: c.opts.VolcanoVersion})
	if err != nil {
		return err
	}
	work := filepath.Join(c.opts.CacheDir, "kind", "build")
	if err := os.MkdirAll(filepath.Join(work, "bin"), 0o755); err != nil {
		return err
	}
	operator, agent := filepath.Join(work, "bin", "gpulab-operator"), filepath.Join(work, "bin", "gpulab-agent")
	// The operator is static, as its release image is; the agent links glibc.
	for _, b := range []command.GoBuild{
		{Pkg: "./operator/cmd/gpulab-operator", Out: operator, Dir: c.root, Static: true},
		{Pkg: "./node-agent/cmd/gpulab-agent", Out: agent, Dir: c.root},
	} {
		if err := command.Run(ctx, b.Cmd()); err != nil {
			return fmt.Errorf("building %s: %w", b.Pkg, err)
		}
	}
	base := nodeimage.BaseRef(nodeimage.DefaultMirror)
	recipes := gpulabRecipes(operator, agent, set, base)
	refs := make([]string, 0, len(recipes))
	for _, r := range recipes {
		if _, err := images.Build(ctx, r, images.Options{WorkDir: work, Log: c.opts.Log}); err != nil {
			return err
		}
		refs = append(refs, r.Ref)
	}
	if err := c.LoadImages(ctx, refs...); err != nil {
		return err
	}
	volcano, err := volcanoManifest(filepath.Join(set.VolcanoModuleDir, "installer", "volcano-development.yaml"), set.VolcanoVersion)
	if err != nil {
		return err
	}
	kubectl := func(stdin []byte, args ...string) error { return c.kubectl(ctx, set, stdin, args...) }
	agentDir, err := agentOverlay(c.opts.GPUAllocation)
	if err != nil {
		return err
	}
	steps := []struct {
		stdin []byte
		args  []string
	}{
		{volcano, []string{"apply", "--server-side", "-f", "-"}},
		{[]byte(defaultQueue), []string{"apply", "--server-side", "-f", "-"}},
		{nil, []string{"-n", "volcano-system", "wait", "--for=condition=Available", "deployment", "--all", "--timeout=5m"}},
		{nil, []string{"apply", "--server-side", "-k", filepath.Join("testbeds", "kind", "operator")}},
		{nil, []string{"apply", "--server-side", "-k", agentDir}},
		{nil, []string{"-n", "gpulab-system", "wait", "--for=condition=Available", "deployment/gpulab-operator", "--timeout=5m"}},
		{nil, []string{"-n", "gpulab-agent", "rollout", "status", "daemonset/gpulab-agent", "--timeout=5m"}},
	}
	for _, s := range steps {
		if err := kubectl(s.stdin, s.args...); err != nil {
			return fmt.Errorf("installing gpulab on kind: %w", err)
		}
	}
	fmt.Fprintf(c.opts.Log, "Volcano %s and gpulab installed in %s\n", set.VolcanoVersion, time.Since(start).Round(time.Second))
	return nil
}

func (c *Cluster) kubectl(ctx context.Context, set *binaries.Set, stdin []byte, args ...string) error {
	cmd := command.Cmd{Name: set.Kubectl, Dir: c.root, Args: append([]string{"--kubeconfig", c.kubeconfig}, args...), Log: c.opts.Log}
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	return command.Run(ctx, cmd)
}

// agentOverlay is the agent's overlay for a GPUAllocation ("" is the
// device plugin), relative to the repository root.
func agentOverlay(allocation string) (string, error) {
	switch allocation {
	case "", GPUAllocationDevicePlugin:
		return filepath.Join("testbeds", "kind", "agent"), nil
	case GPUAllocationDRA:
		return filepath.Join("testbeds", "kind", "agent", "dra"), nil
	}
	return "", fmt.Errorf("kind: GPUAllocation %q: want %s or %s", allocation, GPUAllocationDevicePlugin, GPUAllocationDRA)
}

// SwitchAgent applies the agent overlay of allocation over the installed
// one, as the same field manager, so what only the old mode set goes, and
// waits for the agents' rollout: a running cluster's nodes change from one
// way of handing out GPUs to the other. Release the old mode's GPUs first
// (delete their pods): the two mechanisms do not know each other's.
func (c *Cluster) SwitchAgent(ctx context.Context, allocation string) error {
	dir, err := agentOverlay(allocation)
	if err != nil {
		return err
	}
	set, err := binaries.Lookup(ctx, binaries.Options{CacheDir: c.opts.CacheDir, VolcanoVersion: c.opts.VolcanoVersion})
	if err != nil {
		return err
	}
	for _, args := range [][]string{
		{"apply", "--server-side", "-k", dir},
		{"-n", "gpulab-agent", "rollout", "status", "daemonset/gpulab-agent", "--timeout=5m"},
	} {
		if err := c.kubectl(ctx, set, nil, args...); err != nil {
			return fmt.Errorf("switching the agent to %s: %w", allocation, err)
		}
	}
	c.opts.GPUAllocation = allocation
	return nil
}

// defaultQueue is Volcano's default queue with the fields its admission
// webhook would fill in; without them it never admits a PodGroup.
const defaultQueue = `apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata:
  name: default
spec:
  weight: 1
  reclaimable: true
`

// volcanoManifest is Volcano's development manifest without its admission
// webhook (its Deployment, init Job, Service, RBAC and webhook
// configurations), with the scheduler and controllers on the local images
// of version, the version the manifest is of.
func volcanoManifest(path, version string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading Volcano's manifest: %w", err)
	}
	images := map[string]string{"volcano-scheduler": VolcanoSchedulerImage(version), "volcano-controllers": VolcanoControllerImage(version)}
	var out bytes.Buffer
	objs, err := manifest.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("parsing Volcano's manifest: %w", err)
	}
	for _, obj := range objs {
		if strings.HasPrefix(obj.GetName(), "volcano-admission") || strings.HasSuffix(obj.GetKind(), "WebhookConfiguration") {
			continue
		}
		if image, ok := images[obj.GetName()]; ok && obj.GetKind() == "Deployment" {
			containers, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
			if len(containers) != 1 {
				return nil, fmt.Errorf("the Volcano Deployment %s has %d containers, want 1", obj.GetName(), len(containers))
			}
			container := containers[0].(map[string]any)
			container["image"], container["imagePullPolicy"] = image, "Never"
			if err := unstructured.SetNestedSlice(obj.Object, containers, "spec", "template", "spec", "containers"); err != nil {
				return nil, err
			}
			delete(images, obj.GetName())
		}
		doc, err := yaml.Marshal(obj.Object)
		if err != nil {
			return nil, err
		}
		out.WriteString("---\n")
		out.Write(doc)
	}
	if len(images) > 0 {
		return nil, fmt.Errorf("the Volcano manifest lacks the Deployments %v", images)
	}
	return out.Bytes(), nil
}
