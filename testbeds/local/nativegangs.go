package local

import "strings"

// Native gang scheduling (Kubernetes 1.37.2): what each control-plane
// process needs for kube-scheduler to gang-schedule pods through
// scheduling.k8s.io PodGroups, as `gpulab-testbed up --native-gangs`
// passes it and as the operator's envtest tests start kube-apiserver.
//
// Read from k8s.io/kubernetes@v1.37.2:
//   - GenericWorkload (beta since 1.37, off by default) installs the
//     Workload and PodGroup storage (pkg/registry/scheduling/rest), keeps
//     pods' spec.schedulingGroup (dropped on create while it is off), turns
//     on the PodGroupProtection admission plugin's finalizer, and adds the
//     GangScheduling plugin to kube-scheduler's default profile
//     (pkg/scheduler/apis/config/v1/default_plugins.go: no scheduler
//     configuration file is needed).
//   - kube-scheduler (pkg/scheduler/eventhandlers.go) and
//     kube-controller-manager's podgroup-protection controller, which
//     removes that finalizer once no pod uses the PodGroup, read PodGroups
//     in scheduling.k8s.io/v1beta1, and PodGroups are stored as v1beta1
//     (pkg/kubeapiserver/default_storage_factory_builder.go): a beta
//     version is off by default, so it needs runtime-config. v1alpha3 is
//     served too, for clients written against it (and CompositePodGroups).
//   - The gate goes to all three: without it kube-scheduler ignores
//     schedulingGroup, and without the controller a deleted PodGroup keeps
//     its finalizer forever.
const (
	// NativeGangFeatureGate is the feature gate native gangs need.
	NativeGangFeatureGate = "GenericWorkload"
	// NativeGangFeatureGates is the --feature-gates value for
	// kube-apiserver, kube-scheduler and kube-controller-manager (kwokctl's
	// kubeFeatureGates option, --kube-feature-gates).
	NativeGangFeatureGates = NativeGangFeatureGate + "=true"
	// NativeGangRuntimeConfig is kube-apiserver's --runtime-config value
	// (kwokctl's kubeRuntimeConfig option, --kube-runtime-config).
	NativeGangRuntimeConfig = "scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true"
)

// NativeGangAPIServerArgs are kube-apiserver's flags for native gangs.
func NativeGangAPIServerArgs() []string {
	return []string{"--feature-gates=" + NativeGangFeatureGates, "--runtime-config=" + NativeGangRuntimeConfig}
}

// NativeGangSchedulerArgs are kube-scheduler's flags for native gangs:
// the gate alone, which puts GangScheduling in the default profile.
func NativeGangSchedulerArgs() []string {
	return []string{"--feature-gates=" + NativeGangFeatureGates}
}

// NativeGangControllerManagerArgs are kube-controller-manager's flags for
// native gangs: the gate, which starts the podgroup-protection controller.
func NativeGangControllerManagerArgs() []string {
	return []string{"--feature-gates=" + NativeGangFeatureGates}
}

// NativeGangKwokctlOptions are the KwokctlConfiguration options that give
// every component of a kwokctl cluster what native gangs need. An options
// map that sets kubeFeatureGates or kubeRuntimeConfig already gets the
// values appended, comma-separated.
func NativeGangKwokctlOptions(options map[string]any) {
	add := func(key, value string) {
		if have, ok := options[key].(string); ok && strings.TrimSpace(have) != "" {
			value = have + "," + value
		}
		options[key] = value
	}
	add("kubeFeatureGates", NativeGangFeatureGates)
	add("kubeRuntimeConfig", NativeGangRuntimeConfig)
}
