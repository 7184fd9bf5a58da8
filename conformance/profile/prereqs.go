package profile

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/rbac"
	"github.com/gpulab/gpulab/internal/draclass"
	"github.com/gpulab/gpulab/internal/version"
	"github.com/gpulab/gpulab/testbeds/binaries"
)

// The CRDs each workload needs on an existing cluster, beyond Volcano's
// PodGroups and Queues, which every gang Volcano schedules needs.
var (
	volcanoCRDs  = []string{"podgroups.scheduling.volcano.sh", "queues.scheduling.volcano.sh"}
	gpulabCRDs   = []string{"gpuclusters.gpulab.io", "gpuinventories.gpulab.io"}
	workloadCRDs = map[string][]string{
		"gpucluster": gpulabCRDs,
		"raycluster": {"rayclusters.ray.io"},
		"vcjob":      {"jobs.batch.volcano.sh"},
	}
)

func workloadOrDefault(w string) string {
	if w == "" {
		return "gpucluster"
	}
	return w
}

// missingCRDs lists the CRDs the workload needs that the cluster does not
// serve, and says whether gpulab's are there (its own features need them).
// With nativeGangs (--scheduler=kubernetes) a GPUCluster's gang is
// kube-scheduler's, so Volcano's CRDs are not asked for; KubeRay's and
// Volcano's own Jobs, and the suite's bare gangs, are Volcano's whatever
// the flag says.
func missingCRDs(ctx context.Context, c client.Client, workload string, nativeGangs bool) (missing []string, hasGPULab bool, err error) {
	needed := append([]string(nil), workloadCRDs[workloadOrDefault(workload)]...)
	if !nativeGangs || workloadOrDefault(workload) != "gpucluster" {
		needed = append(needed, volcanoCRDs...)
	}
	present := map[string]bool{}
	for _, crd := range append(append([]string(nil), needed...), gpulabCRDs...) {
		if _, seen := present[crd]; seen {
			continue
		}
		err := c.Get(ctx, client.ObjectKey{Name: crd}, &apiextensionsv1.CustomResourceDefinition{})
		switch {
		case apierrors.IsNotFound(err):
			present[crd] = false
		case err != nil:
			// Forbidden, a timeout: not evidence that it is missing.
			return nil, false, fmt.Errorf("checking CRD %s: %w", crd, err)
		default:
			present[crd] = true
		}
	}
	hasGPULab = present[gpulabCRDs[0]] && present[gpulabCRDs[1]]
	for _, crd := range needed {
		if !present[crd] {
			missing = append(missing, crd)
		}
	}
	return missing, hasGPULab, nil
}

// installHint names releases that are published and that the suite is
// tested with, never a floating tag.
func installHint(workload string, nativeGangs bool) string {
	volcano := "Volcano " + binaries.DefaultVolcanoVersion + " (its release manifests)"
	switch workloadOrDefault(workload) {
	case "raycluster":
		return "install " + volcano + " and KubeRay " + binaries.DefaultKubeRayVersion + " (its operator with --batch-scheduler=volcano)"
	case "vcjob":
		return "install " + volcano + ", whose controllers serve batch.volcano.sh Jobs"
	case "bare":
		return "install " + volcano
	}
	gpulab := "gpulab " + version.Get().Version + " (its Helm chart, charts/gpulab at that tag: docs/install.md)"
	if nativeGangs {
		return "install " + gpulab
	}
	return "install " + volcano + " and " + gpulab + ", or run with --scheduler=kubernetes on a cluster with native gangs"
}

// checkDeviceClass is the DRA stack's preflight: with --gpu-allocation=dra
// every gang's claims name the DeviceClass (default draclass.DriverName),
// so a cluster without it, or without DRA at all, would fail every gang;
// it is named now, with how to install it.
func checkDeviceClass(ctx context.Context, c client.Client, name string) error {
	if name == "" {
		name = draclass.DriverName
	}
	err := c.Get(ctx, client.ObjectKey{Name: name}, &resourceapi.DeviceClass{})
	switch {
	case err == nil:
		return nil
	case meta.IsNoMatchError(err):
		return fmt.Errorf("--gpu-allocation=dra: the cluster does not serve resource.k8s.io/v1 DeviceClasses "+
			"(Dynamic Resource Allocation, GA in Kubernetes 1.34), so it has no DeviceClass %s: %s: %w", name, deviceClassHint(name), err)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("--gpu-allocation=dra: the cluster has no DeviceClass %s, which every gang's claims name: %s", name, deviceClassHint(name))
	default:
		// Forbidden, a timeout: not evidence that it is missing.
		return fmt.Errorf("checking DeviceClass %s: %w", name, err)
	}
}

// deviceClassHint says how to install the DRA driver whose DeviceClass is
// name: gpulab's agent for its own, else the driver that publishes it.
func deviceClassHint(name string) string {
	agent := "install gpulab's DRA driver, which creates it: the node agent with the kustomize component node-agent/config/dra " +
		"(the DeviceClass alone: kubectl apply --server-side -k node-agent/config/dra/access) or the chart's agent.dra.enabled=true " +
		"(docs/operator/dra.md)"
	if name == draclass.DriverName {
		return agent
	}
	return "install the DRA driver that publishes it (gpu.nvidia.com: NVIDIA's dra-driver-nvidia-gpu), or " + agent +
		" and run with --device-class=" + draclass.DriverName
}

// checkKubeRayBatchScheduler finds KubeRay's operator and checks it was
// started with Volcano batch scheduling: without it RayClusters get no
// PodGroup and are not gangs at all, which the suite would report as
// failures of the scheduler instead of the setup. It reads only the
// Deployments named rbac.KubeRayDeployment (KubeRay's own name for it),
// in any namespace: the role lets the suite read no other.
func checkKubeRayBatchScheduler(ctx context.Context, c client.Client, metricsURL string) error {
	var deps appsv1.DeploymentList
	if err := c.List(ctx, &deps, client.MatchingFields{"metadata.name": rbac.KubeRayDeployment}); err != nil {
		return fmt.Errorf("looking for KubeRay's operator (Deployment %s): %w", rbac.KubeRayDeployment, err)
	}
	found := false
	for _, d := range deps.Items {
		for _, ctr := range d.Spec.Template.Spec.Containers {
			if !strings.Contains(ctr.Image, "kuberay") && !strings.Contains(d.Name, "kuberay-operator") {
				continue
			}
			found = true
			if KubeRayUsesVolcano(append(append([]string(nil), ctr.Command...), ctr.Args...)) {
				return nil
			}
		}
	}
	switch {
	case !found && metricsURL != "":
		// Given where it runs (a process, or a Deployment of another
		// name): trust its flags.
		return nil
	case !found:
		return fmt.Errorf("no KubeRay operator Deployment named %s found: --workload=raycluster needs KubeRay with --batch-scheduler=volcano "+
			"(one of another name, or outside a Deployment: give --operator-metrics-url)", rbac.KubeRayDeployment)
	}
	return fmt.Errorf("KubeRay's operator is not started with --batch-scheduler=volcano (or --enable-batch-scheduler): its RayClusters would not be gang-scheduled")
}

// checkConfinement is rbac.CheckConfinement: for the in-cluster runner (a
// ServiceAccount), that the cluster serves ValidatingAdmissionPolicy v1
// (Kubernetes 1.30) and that the suite's policy confines it. It returns
// the line the dry run reports.
func checkConfinement(ctx context.Context, c client.Client, dc discovery.DiscoveryInterface) (string, error) {
	return rbac.CheckConfinement(ctx, c, dc)
}

// KubeRayUsesVolcano says whether KubeRay operator arguments turn on
// Volcano batch scheduling: --batch-scheduler=volcano (v1.2 and later), or
// the older --enable-batch-scheduler, whose only scheduler was Volcano.
func KubeRayUsesVolcano(args []string) bool {
	for i, a := range args {
		a = "--" + strings.TrimLeft(a, "-")
		switch {
		case a == "--batch-scheduler=volcano", a == "--batch-scheduler" && i+1 < len(args) && args[i+1] == "volcano":
			return true
		case a == "--enable-batch-scheduler", a == "--enable-batch-scheduler=true":
			return true
		}
	}
	return false
}
