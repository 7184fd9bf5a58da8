package v1alpha1_test

import (
	"context"
	"flag"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/testbeds/envtest"
)

// env is one real API server for every validation test in the package.
var env *envtest.Environment

func TestMain(m *testing.M) {
	os.Exit(runWithEnv(m))
}

func runWithEnv(m *testing.M) int {
	flag.Parse()
	if !testing.Short() {
		var err error
		env, err = envtest.Start(context.Background(), envtest.Options{})
		if err != nil {
			panic(err)
		}
		defer func() { _ = env.Stop() }()
	}
	return m.Run()
}

func needEnv(t *testing.T) client.Client {
	t.Helper()
	if env == nil {
		t.Skip("needs a real kube-apiserver; skipped with -short")
	}
	return env.Client
}

func podTemplate() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}}}
}

func validCluster(name string) *v1.GPUCluster {
	return &v1.GPUCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.GPUClusterSpec{
			Head: v1.HeadSpec{Template: podTemplate()},
			WorkerGroups: []v1.WorkerGroupSpec{{
				Name:     "workers",
				Replicas: 2,
				GPUs:     &v1.GPURequest{PerPod: new(int32(4))},
				Template: podTemplate(),
			}},
		},
	}
}

func validJob(name string) *v1.GPUJob {
	return &v1.GPUJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.GPUJobSpec{
			ClusterTemplate: &validCluster("unused").Spec,
			Submitter:       podTemplate(),
		},
	}
}

func TestGPUClusterValidation(t *testing.T) {
	c := needEnv(t)
	tests := []struct {
		name    string
		mutate  func(*v1.GPUCluster)
		message string // empty: must be accepted
	}{
		{name: "valid", mutate: func(*v1.GPUCluster) {}},
		{name: "no worker groups", message: "should have at least 1 items",
			mutate: func(g *v1.GPUCluster) { g.Spec.WorkerGroups = []v1.WorkerGroupSpec{} }},
		{name: "duplicate group names", message: "worker group names must be unique",
			mutate: func(g *v1.GPUCluster) {
				g.Spec.WorkerGroups = append(g.Spec.WorkerGroups, g.Spec.WorkerGroups[0])
			}},
		{name: "minReplicas above replicas", message: "minReplicas must not exceed replicas",
			mutate: func(g *v1.GPUCluster) { g.Spec.WorkerGroups[0].MinReplicas = new(int32(3)) }},
		{name: "replicas above maxReplicas", message: "replicas must not exceed maxReplicas",
			mutate: func(g *v1.GPUCluster) { g.Spec.WorkerGroups[0].MaxReplicas = new(int32(1)) }},
		{name: "perPod with wholeNode", message: "gpus.perPod and gpus.wholeNode are mutually exclusive",
			mutate: func(g *v1.GPUCluster) { g.Spec.WorkerGroups[0].GPUs.WholeNode = true }},
		{name: "gpus without a count", message: "gpus needs either perPod or wholeNode: true",
			mutate: func(g *v1.GPUCluster) { g.Spec.WorkerGroups[0].GPUs = &v1.GPURequest{Product: "NVIDIA-H100-80GB-HBM3"} }},
		{name: "DRA GPUs", mutate: func(g *v1.GPUCluster) {
			g.Spec.WorkerGroups[0].GPUs.DeviceClassName = "gpu.nvidia.com"
			g.Spec.WorkerGroups[0].GPUs.Selectors = []string{`device.attributes["gpu.nvidia.com"].architecture == "Hopper"`}
		}},
		{name: "DRA GPUs for a whole node", message: "gpus.deviceClassName (DRA) needs perPod",
			mutate: func(g *v1.GPUCluster) {
				g.Spec.WorkerGroups[0].GPUs = &v1.GPURequest{WholeNode: true, DeviceClassName: "gpu.gpulab.io"}
			}},
		{name: "selectors without a DeviceClass", message: "gpus.selectors need gpus.deviceClassName",
			mutate: func(g *v1.GPUCluster) { g.Spec.WorkerGroups[0].GPUs.Selectors = []string{"true"} }},
		{name: "a DeviceClass name with capitals", message: "deviceClassName in body should match",
			mutate: func(g *v1.GPUCluster) { g.Spec.WorkerGroups[0].GPUs.DeviceClassName = "GPU.example" }},
		{name: "negative replicas", message: "replicas in body should be greater than or equal to 0",
			mutate: func(g *v1.GPUCluster) { g.Spec.WorkerGroups[0].Replicas = -1 }},
		{name: "negative minReplicas", message: "minReplicas in body should be greater than or equal to 0",
			mutate: func(g *v1.GPUCluster) { g.Spec.WorkerGroups[0].MinReplicas = new(int32(-1)) }},
		{name: "zero GPUs per pod", message: "perPod in body should be greater than or equal to 1",
			mutate: func(g *v1.GPUCluster) { g.Spec.WorkerGroups[0].GPUs.PerPod = new(int32(0)) }},
		{name: "replicas beyond the index width", message: "replicas in body should be less than or equal to 999",
			mutate: func(g *v1.GPUCluster) { g.Spec.WorkerGroups[0].Replicas = 1000 }},
		{name: "cluster name too long", message: "metadata.name must be at most 58 characters",
			mutate: func(g *v1.GPUCluster) { g.Name = strings.Repeat("c", 59) }},
		{name: "cluster and group names too long together", message: "cluster name plus worker group name must be at most 58 characters",
			mutate: func(g *v1.GPUCluster) {
				g.Name = strings.Repeat("c", 30)
				g.Spec.WorkerGroups[0].Name = strings.Repeat("w", 29)
			}},
		{name: "cluster name starting with a digit", message: "metadata.name must start with a letter",
			mutate: func(g *v1.GPUCluster) { g.Name = "1cluster" }},
		{name: "group named head", message: "worker group name 'head' is reserved",
			mutate: func(g *v1.GPUCluster) { g.Spec.WorkerGroups[0].Name = "head" }},
		{name: "group name with capitals", message: "spec.workerGroups[0].name in body should match",
			mutate: func(g *v1.GPUCluster) { g.Spec.WorkerGroups[0].Name = "Workers" }},
		{name: "group name with a dash (pod names could collide across clusters)", message: "worker group names may not contain '-'",
			mutate: func(g *v1.GPUCluster) { g.Spec.WorkerGroups[0].Name = "x-w1" }},
		{name: "unknown scheduler", message: `supported values: "volcano", "kubernetes", "default"`,
			mutate: func(g *v1.GPUCluster) { g.Spec.Scheduling.Scheduler = "yunikorn" }},
		{name: "a Volcano queue for kube-scheduler's gangs", message: "scheduler kubernetes takes only the default queue",
			mutate: func(g *v1.GPUCluster) {
				g.Spec.Scheduling.Scheduler = v1.SchedulerKubernetes
				g.Spec.Scheduling.Queue = "research"
			}},
		{name: "head without containers", message: "spec.head.template.spec.containers: Required value",
			mutate: func(g *v1.GPUCluster) { g.Spec.Head.Template.Spec.Containers = nil }},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj := validCluster("case-" + string(rune('a'+i)))
			tc.mutate(obj)
			expectCreate(t, c, obj, tc.message)
		})
	}
}

// TestGPUClusterImmutableFields updates a stored cluster: what a running gang
// depends on (scheduler, GPUs per pod) is refused with its message; what the
// operator rolls out (templates, replicas, queue) is accepted.
func TestGPUClusterImmutableFields(t *testing.T) {
	c := needEnv(t)
	ctx := context.Background()
	tests := []struct {
		name    string
		mutate  func(*v1.GPUCluster)
		message string // empty: must be accepted
	}{
		{name: "scheduler", message: "scheduling.scheduler is immutable",
			mutate: func(g *v1.GPUCluster) { g.Spec.Scheduling.Scheduler = v1.SchedulerDefault }},
		{name: "worker GPUs per pod", message: "workerGroups[].gpus is immutable",
			mutate: func(g *v1.GPUCluster) { g.Spec.WorkerGroups[0].GPUs.PerPod = new(int32(8)) }},
		{name: "worker GPUs removed", message: "workerGroups[].gpus is immutable",
			mutate: func(g *v1.GPUCluster) { g.Spec.WorkerGroups[0].GPUs = nil }},
		{name: "head GPUs added", message: "head.gpus is immutable",
			mutate: func(g *v1.GPUCluster) { g.Spec.Head.GPUs = &v1.GPURequest{PerPod: new(int32(1))} }},
		{name: "worker template", mutate: func(g *v1.GPUCluster) { g.Spec.WorkerGroups[0].Template.Spec.Containers[0].Image = "busybox:1.37" }},
		{name: "replicas", mutate: func(g *v1.GPUCluster) { g.Spec.WorkerGroups[0].Replicas = 3 }},
		{name: "queue", mutate: func(g *v1.GPUCluster) { g.Spec.Scheduling.Queue = "research" }},
		{name: "a new group", mutate: func(g *v1.GPUCluster) {
			g.Spec.WorkerGroups = append(g.Spec.WorkerGroups, v1.WorkerGroupSpec{Name: "cpu", Replicas: 1, Template: podTemplate()})
		}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj := validCluster("immutable-" + string(rune('a'+i)))
			if err := c.Create(ctx, obj); err != nil {
				t.Fatalf("create: %v", err)
			}
			tc.mutate(obj)
			expectUpdate(t, c, obj, tc.message)
		})
	}
}

// expectUpdate updates obj and checks the API server's answer: accepted
// when message is empty, else rejected with an error containing it.
func expectUpdate(t *testing.T, c client.Client, obj client.Object, message string) {
	t.Helper()
	err := c.Update(context.Background(), obj)
	t.Logf("update %s: %v", obj.GetName(), err)
	switch {
	case message == "" && err != nil:
		t.Fatalf("allowed change rejected: %v", err)
	case message != "" && err == nil:
		t.Fatalf("change accepted; want an error containing %q", message)
	case message != "" && !strings.Contains(err.Error(), message):
		t.Fatalf("rejected with %q; want it to contain %q", err, message)
	}
}

// TestNativeGangCluster: scheduler kubernetes is accepted with the default
// queue (set or defaulted), and a queue cannot be added to it later.
func TestNativeGangCluster(t *testing.T) {
	c := needEnv(t)
	ctx := context.Background()
	for name, queue := range map[string]string{"native-defaulted": "", "native-default-queue": "default"} {
		obj := validCluster(name)
		obj.Spec.Scheduling = v1.SchedulingSpec{Scheduler: v1.SchedulerKubernetes, Queue: queue}
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if obj.Spec.Scheduling.Queue != "default" {
			t.Errorf("%s: queue %q, want default", name, obj.Spec.Scheduling.Queue)
		}
	}
	obj := &v1.GPUCluster{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "native-defaulted"}, obj); err != nil {
		t.Fatal(err)
	}
	obj.Spec.Scheduling.Queue = "research"
	expectUpdate(t, c, obj, "scheduler kubernetes takes only the default queue")
}

func TestGPUClusterDefaults(t *testing.T) {
	c := needEnv(t)
	obj := validCluster("defaults")
	if err := c.Create(context.Background(), obj); err != nil {
		t.Fatalf("create: %v", err)
	}
	if got := obj.Spec.Scheduling.Scheduler; got != v1.SchedulerVolcano {
		t.Errorf("scheduler defaulted to %q, want %q", got, v1.SchedulerVolcano)
	}
	if got := obj.Spec.Scheduling.Queue; got != "default" {
		t.Errorf("queue defaulted to %q, want default", got)
	}
}

func TestGPUJobValidation(t *testing.T) {
	c := needEnv(t)
	tests := []struct {
		name    string
		mutate  func(*v1.GPUJob)
		message string
	}{
		{name: "valid", mutate: func(*v1.GPUJob) {}},
		{name: "valid on an existing cluster", mutate: func(j *v1.GPUJob) {
			j.Spec.ClusterTemplate = nil
			j.Spec.ClusterRef = &corev1.LocalObjectReference{Name: "shared"}
		}},
		{name: "both template and ref", message: "set exactly one of clusterTemplate and clusterRef",
			mutate: func(j *v1.GPUJob) { j.Spec.ClusterRef = &corev1.LocalObjectReference{Name: "shared"} }},
		{name: "neither template nor ref", message: "set exactly one of clusterTemplate and clusterRef",
			mutate: func(j *v1.GPUJob) { j.Spec.ClusterTemplate = nil }},
		{name: "deleting a referenced cluster", message: "cleanupPolicy DeleteCluster needs clusterTemplate",
			mutate: func(j *v1.GPUJob) {
				j.Spec.ClusterTemplate = nil
				j.Spec.ClusterRef = &corev1.LocalObjectReference{Name: "shared"}
				j.Spec.CleanupPolicy = v1.CleanupDeleteCluster
			}},
		{name: "negative backoffLimit", message: "backoffLimit in body should be greater than or equal to 0",
			mutate: func(j *v1.GPUJob) { j.Spec.BackoffLimit = new(int32(-1)) }},
		{name: "zero deadline", message: "activeDeadlineSeconds in body should be greater than or equal to 1",
			mutate: func(j *v1.GPUJob) { j.Spec.ActiveDeadlineSeconds = new(int64(0)) }},
		{name: "invalid cluster template", message: "minReplicas must not exceed replicas",
			mutate: func(j *v1.GPUJob) { j.Spec.ClusterTemplate.WorkerGroups[0].MinReplicas = new(int32(5)) }},
		{name: "job and group names too long together", message: "job name plus worker group name must be at most 54 characters",
			mutate: func(j *v1.GPUJob) {
				j.Name = strings.Repeat("j", 30)
				j.Spec.ClusterTemplate.WorkerGroups[0].Name = strings.Repeat("w", 25)
			}},
		{name: "suspending a referenced cluster", message: "cleanupPolicy SuspendCluster needs clusterTemplate",
			mutate: func(j *v1.GPUJob) {
				j.Spec.ClusterTemplate = nil
				j.Spec.ClusterRef = &corev1.LocalObjectReference{Name: "shared"}
				j.Spec.CleanupPolicy = v1.CleanupSuspendCluster
			}},
		{name: "unknown cleanup policy", message: `supported values: "DeleteCluster", "KeepCluster", "SuspendCluster"`,
			mutate: func(j *v1.GPUJob) { j.Spec.CleanupPolicy = "Archive" }},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj := validJob("job-" + string(rune('a'+i)))
			tc.mutate(obj)
			expectCreate(t, c, obj, tc.message)
		})
	}
}

// TestGPUJobImmutableFields: what an attempt was built from cannot change
// under it (batch/v1 makes a Job's pod template immutable the same way);
// suspend and the limits stay mutable.
func TestGPUJobImmutableFields(t *testing.T) {
	c := needEnv(t)
	ctx := context.Background()
	onRef := func(j *v1.GPUJob) {
		j.Spec.ClusterTemplate = nil
		j.Spec.ClusterRef = &corev1.LocalObjectReference{Name: "shared"}
	}
	tests := []struct {
		name    string
		create  func(*v1.GPUJob)
		mutate  func(*v1.GPUJob)
		message string // empty: must be accepted
	}{
		{name: "template to ref", mutate: onRef, message: "clusterTemplate and clusterRef cannot be switched"},
		{name: "ref to template", create: onRef, message: "clusterTemplate and clusterRef cannot be switched",
			mutate: func(j *v1.GPUJob) {
				j.Spec.ClusterRef = nil
				j.Spec.ClusterTemplate = &validCluster("unused").Spec
			}},
		{name: "another ref", create: onRef, message: "clusterRef is immutable",
			mutate: func(j *v1.GPUJob) { j.Spec.ClusterRef.Name = "other" }},
		{name: "cluster template", message: "clusterTemplate is immutable",
			mutate: func(j *v1.GPUJob) { j.Spec.ClusterTemplate.WorkerGroups[0].Replicas = 3 }},
		{name: "submitter", message: "submitter is immutable",
			mutate: func(j *v1.GPUJob) { j.Spec.Submitter.Spec.Containers[0].Image = "busybox:1.37" }},
		{name: "suspend", mutate: func(j *v1.GPUJob) { j.Spec.Suspend = true }},
		{name: "deadline", mutate: func(j *v1.GPUJob) { j.Spec.ActiveDeadlineSeconds = new(int64(60)) }},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj := validJob("immutable-job-" + string(rune('a'+i)))
			if tc.create != nil {
				tc.create(obj)
			}
			if err := c.Create(ctx, obj); err != nil {
				t.Fatalf("create: %v", err)
			}
			tc.mutate(obj)
			expectUpdate(t, c, obj, tc.message)
		})
	}
}

func TestGPUInventoryValidation(t *testing.T) {
	c := needEnv(t)
	inv := func(name string, state v1.HealthState) *v1.GPUInventory {
		return &v1.GPUInventory{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: v1.GPUInventoryStatus{
				Summary: v1.InventorySummary{Count: 1, Healthy: 1, Product: "NVIDIA-H100-80GB-HBM3"},
				GPUs:    []v1.GPUDevice{{Index: 0, UUID: "GPU-0", Health: v1.GPUHealth{State: state}}},
			},
		}
	}
	expectCreate(t, c, inv("node-a", v1.GPUHealthy), "")
	expectCreate(t, c, inv("node-b", "Sick"), `supported values: "Healthy", "Unhealthy", "Unknown"`)
}

// expectCreate creates obj and checks the API server's verdict: accepted when
// message is empty, otherwise rejected with an error containing message.
func expectCreate(t *testing.T, c client.Client, obj client.Object, message string) {
	t.Helper()
	err := c.Create(context.Background(), obj)
	t.Logf("create %s: %v", obj.GetName(), err)
	switch {
	case message == "" && err != nil:
		t.Fatalf("valid object rejected: %v", err)
	case message != "" && err == nil:
		t.Fatalf("invalid object accepted; want an error containing %q", message)
	case message != "" && !strings.Contains(err.Error(), message):
		t.Fatalf("rejected with %q; want it to contain %q", err, message)
	}
}
