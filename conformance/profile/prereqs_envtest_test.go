package profile

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/gpulab/gpulab/internal/draclass"
	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

// TestWorkloadPrerequisites runs the checks against a real API server
// that serves Volcano's and KubeRay's CRDs but not gpulab's: a cluster of
// KubeRay on Volcano, measured as it is.
func TestWorkloadPrerequisites(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real kube-apiserver; skipped with -short")
	}
	ctx := context.Background()
	set, err := binaries.Lookup(ctx, binaries.Options{})
	if err != nil {
		t.Fatal(err)
	}
	env := envtest.StartForTest(t, envtest.Options{CRDDirs: []string{
		filepath.Join(set.VolcanoModuleDir, "config", "crd", "volcano", "bases"),
		filepath.Join(set.KubeRayModuleDir, "config", "crd", "bases"),
	}})
	c := env.Client
	for _, tc := range []struct {
		workload  string
		missing   []string
		hasGPULab bool
	}{
		{"gpucluster", []string{"gpuclusters.gpulab.io", "gpuinventories.gpulab.io"}, false},
		{"raycluster", nil, false},
		{"vcjob", nil, false},
	} {
		missing, hasGPULab, err := missingCRDs(ctx, c, tc.workload, false)
		if err != nil || !reflect.DeepEqual(missing, tc.missing) || hasGPULab != tc.hasGPULab {
			t.Errorf("%s: missing %v, gpulab %v, %v; want %v, %v", tc.workload, missing, hasGPULab, err, tc.missing, tc.hasGPULab)
		}
	}

	// KubeRay: found by its Deployment, and only with Volcano batch scheduling.
	wantErr := func(metricsURL, want string) {
		t.Helper()
		err := checkKubeRayBatchScheduler(ctx, c, metricsURL)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("KubeRay check = %v, want %q", err, want)
		}
	}
	wantErr("", "no KubeRay operator Deployment named kuberay-operator found")
	wantErr("http://127.0.0.1:8080/metrics", "")
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ray-system"}}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app.kubernetes.io/name": "kuberay-operator"}
	deployment := func(name string) *appsv1.Deployment {
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ray-system", Name: name},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "kuberay-operator", Image: "quay.io/kuberay/operator:v1.5.0", Command: []string{"/manager"}, Args: []string{"--leader-election-namespace=ray-system"},
				}}}},
			},
		}
	}
	// The suite may read only the Deployment of KubeRay's own name: one
	// of another name is not looked at, whatever its image.
	if err := c.Create(ctx, deployment("ray-operator")); err != nil {
		t.Fatal(err)
	}
	wantErr("", "no KubeRay operator Deployment named kuberay-operator found")
	dep := deployment("kuberay-operator")
	if err := c.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	wantErr("", "not started with --batch-scheduler=volcano")
	// Given a metrics URL, a Deployment that is there still has to say so.
	wantErr("http://127.0.0.1:8080/metrics", "not started with --batch-scheduler=volcano")
	dep.Spec.Template.Spec.Containers[0].Args = append(dep.Spec.Template.Spec.Containers[0].Args, "--batch-scheduler=volcano")
	if err := c.Update(ctx, dep); err != nil {
		t.Fatal(err)
	}
	wantErr("", "")
}

// TestDRAPreflightNeedsTheDeviceClass: on a real API server that serves
// gpulab's and Volcano's CRDs and DRA but has no DeviceClass, a run asking
// for DRA gangs fails its preflight naming the class and how to install
// it; once gpulab's class is there, the same preflight passes. A run that
// does not ask for DRA never looks.
func TestDRAPreflightNeedsTheDeviceClass(t *testing.T) {
	env := envtest.StartForTest(t, envtest.Options{})
	ctx := t.Context()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	kc.AuthInfos["envtest"] = &clientcmdapi.AuthInfo{ClientCertificateData: env.Config.CertData, ClientKeyData: env.Config.KeyData}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "envtest"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	connect := func(dra bool, class string) error {
		_, err := Connect(ctx, Options{Profile: "cluster", Kubeconfig: path, DRAGangs: dra, DeviceClass: class})
		return err
	}
	wantErr := func(err error, want ...string) {
		t.Helper()
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("preflight: %v, want an error with %q", err, w)
			}
		}
	}
	if err := connect(false, ""); err != nil {
		t.Fatalf("preflight without DRA: %v", err)
	}
	wantErr(connect(true, ""), "--gpu-allocation=dra: the cluster has no DeviceClass gpu.gpulab.io",
		"node-agent/config/dra", "agent.dra.enabled=true")
	wantErr(connect(true, "gpu.nvidia.com"), "no DeviceClass gpu.nvidia.com", "NVIDIA's dra-driver-nvidia-gpu", "--device-class=gpu.gpulab.io")

	if err := env.Client.Create(ctx, draclass.GPUClass(draclass.DriverName)); err != nil {
		t.Fatal(err)
	}
	if err := connect(true, ""); err != nil {
		t.Errorf("preflight with DeviceClass %s: %v", draclass.DriverName, err)
	}
	if err := connect(true, draclass.DriverName); err != nil {
		t.Errorf("preflight with --device-class=%s: %v", draclass.DriverName, err)
	}
	wantErr(connect(true, "gpu.nvidia.com"), "no DeviceClass gpu.nvidia.com")
}

// The local testbed installs gpulab's DeviceClass only: DRA gangs asking
// for another are refused before a testbed is made.
func TestLocalDRAGangsNeedGPULabsClass(t *testing.T) {
	_, err := Setup(t.Context(), Options{Profile: "local", DRAGangs: true, DeviceClass: "gpu.nvidia.com"})
	if err == nil || !strings.Contains(err.Error(), "the local testbed has no DeviceClass gpu.nvidia.com") {
		t.Errorf("local DRA gangs of gpu.nvidia.com: %v, want a refusal naming the class", err)
	}
}
