package cli

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpulab/gpulab/conformance/footprint"
	"github.com/gpulab/gpulab/conformance/incluster"
	"github.com/gpulab/gpulab/conformance/measure"
	"github.com/gpulab/gpulab/testbeds/kind"
)

// maxRunIDLength keeps every name built from a run id (a namespace per
// scenario, the runner's Job) within Kubernetes' 63.
const maxRunIDLength = 24

// validateNames checks --run-id (a label value and a name suffix) and
// --results-configmap before either becomes part of a name.
func (o *RunOptions) validateNames() error {
	if msgs := validation.IsDNS1123Label(o.RunID); o.RunID != "" && (len(msgs) > 0 || len(o.RunID) > maxRunIDLength) {
		return fmt.Errorf("--run-id=%q: want lower-case letters, digits and '-', at most %d characters", o.RunID, maxRunIDLength)
	}
	if msgs := validation.IsDNS1123Label(o.VolcanoNamespace); len(msgs) > 0 {
		return fmt.Errorf("--volcano-namespace=%q: not a namespace name: %s", o.VolcanoNamespace, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsDNS1123Subdomain(o.RuntimeClass); o.RuntimeClass != "" && len(msgs) > 0 {
		return fmt.Errorf("--runtime-class=%q: not a RuntimeClass name: %s", o.RuntimeClass, strings.Join(msgs, "; "))
	}
	if o.ResultsConfigMap == "" {
		return nil
	}
	ns, name, err := incluster.ParseConfigMapRef(o.ResultsConfigMap)
	if err == nil {
		if msgs := append(validation.IsDNS1123Label(ns), validation.IsDNS1123Subdomain(name)...); len(msgs) > 0 {
			err = errors.New(strings.Join(msgs, "; "))
		}
	}
	if err != nil {
		return fmt.Errorf("--results-configmap: %w", err)
	}
	return nil
}

func (o *RunOptions) validate(set map[string]bool) error {
	if err := o.validateNames(); err != nil {
		return err
	}
	switch o.Profile {
	case "local", "kind", "cluster":
	default:
		return fmt.Errorf("--profile=%q: want local, kind or cluster", o.Profile)
	}
	if !o.MaxGPUs.IsSet() {
		if o.Profile == "local" {
			o.MaxGPUs = footprint.Budget{All: true}
		} else {
			o.MaxGPUs = footprint.Budget{GPUs: footprint.DefaultClusterBudget}
		}
	}
	if !set["disruptive"] {
		// local and kind clusters are the run's own; a cluster is not.
		o.Disruptive = o.Profile != "cluster"
	}
	if o.Profile == "kind" {
		// Nothing is pulled on kind: the testbed loads this image.
		for name, p := range map[string]*string{"image": &o.Image, "submitter-image": &o.SubmitImage} {
			if !set[name] {
				*p = kind.WorkloadImage
			}
		}
	}
	if o.Profile == "local" {
		for _, name := range []string{"kubeconfig", "context"} {
			if set[name] {
				return fmt.Errorf("--%s is for --profile=cluster; the local profile makes its own testbed", name)
			}
		}
		if o.RealGPUs {
			return errors.New("--real-gpus needs real GPUs: the local testbed's are fake (use --profile=cluster or kind)")
		}
	} else {
		for name, what := range map[string]string{"fleet": "sizes the local testbed", "testbed-name": "names the local testbed", "operator-binary": "runs in the local testbed"} {
			if set[name] {
				return fmt.Errorf("--%s %s; --profile=%s has its own nodes and operator", name, what, o.Profile)
			}
		}
	}
	if o.Profile == "kind" && o.DryRun {
		return errors.New("--profile=kind --dry-run: the kind profile creates its cluster first, so there is nothing to plan on yet; " +
			"on a kind cluster that is up, run --profile=cluster --kubeconfig=<the kind cluster's kubeconfig> --dry-run")
	}
	switch o.Workload {
	case "gpucluster", "raycluster", "vcjob", "bare":
	default:
		return fmt.Errorf("--workload=%q: want gpucluster, raycluster, vcjob or bare", o.Workload)
	}
	switch {
	case o.Scheduler != "volcano" && o.Scheduler != "kubernetes":
		return fmt.Errorf("--scheduler=%q: want volcano or kubernetes", o.Scheduler)
	case o.Scheduler == "kubernetes" && o.Workload != "gpucluster":
		return fmt.Errorf("--scheduler=kubernetes gang-schedules gpulab's GPUClusters only, not --workload=%s", o.Workload)
	}
	switch {
	case o.GPUAllocation != "extended-resource" && o.GPUAllocation != "dra":
		return fmt.Errorf("--gpu-allocation=%q: want extended-resource or dra", o.GPUAllocation)
	case o.GPUAllocation == "dra" && o.Workload != "gpucluster":
		return fmt.Errorf("--gpu-allocation=dra claims GPUs for gpulab's GPUClusters only, not --workload=%s", o.Workload)
	}
	if msgs := validation.IsDNS1123Subdomain(o.DeviceClass); len(msgs) > 0 {
		return fmt.Errorf("--device-class=%q: not a DeviceClass name: %s", o.DeviceClass, strings.Join(msgs, "; "))
	}
	if err := o.validateAutoscaler(); err != nil {
		return err
	}
	if o.ClientQPS < 1 {
		return fmt.Errorf("--client-qps must be at least 1, got %d", o.ClientQPS)
	}
	if o.Scale < 1 {
		return fmt.Errorf("--scale must be at least 1, got %d", o.Scale)
	}
	// A zero window would pass the gang checks without watching anything,
	// and a zero timeout fail every wait at once.
	for name, d := range map[string]time.Duration{"wait-window": o.WaitWindow, "ready-timeout": o.ReadyTimeout, "timeout": o.Timeout} {
		if d <= 0 {
			return fmt.Errorf("--%s must be positive, got %s", name, d)
		}
	}
	if o.LockWait < 0 {
		return fmt.Errorf("--lock-wait must not be negative, got %s", o.LockWait)
	}
	for name, v := range map[string]string{"namespace": o.Namespace, "operator-namespace": o.OperatorNamespace, "lock-namespace": o.LockNamespace} {
		if v != "" {
			if errs := validation.IsDNS1123Label(v); len(errs) > 0 {
				return fmt.Errorf("--%s=%q: %s", name, v, strings.Join(errs, "; "))
			}
		}
	}
	if o.Queue != "" {
		if errs := validation.IsDNS1123Subdomain(o.Queue); len(errs) > 0 {
			return fmt.Errorf("--queue=%q: %s", o.Queue, strings.Join(errs, "; "))
		}
	}
	if o.ClusterName != "" {
		if errs := validation.IsValidLabelValue(o.ClusterName); len(errs) > 0 {
			return fmt.Errorf("--cluster-name=%q: %s", o.ClusterName, strings.Join(errs, "; "))
		}
	}
	for name, v := range map[string]string{"prometheus-url": o.PrometheusURL, "pushgateway-url": o.PushgatewayURL, "operator-metrics-url": o.OperatorMetricsURL} {
		if v == "" {
			continue
		}
		if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--%s=%q: want an http:// or https:// URL", name, v)
		}
	}
	if o.PushBaseline != "" {
		if o.PushgatewayURL == "" {
			return errors.New("--push-baseline needs --pushgateway-url")
		}
		if _, err := os.Stat(o.PushBaseline); err != nil {
			return fmt.Errorf("--push-baseline: %w", err)
		}
	}
	if err := o.validatePrometheusFiles(); err != nil {
		return err
	}
	for name, v := range map[string]string{"feature": o.Features, "skip-feature": o.SkipFeatures, "assess": o.Assess, "skip-assess": o.SkipAssess} {
		if _, err := regexp.Compile(v); err != nil {
			return fmt.Errorf("--%s: %w", name, err)
		}
	}
	for name, v := range map[string]string{"image": o.Image, "submitter-image": o.SubmitImage, "probe-image": o.ProbeImage, "out": o.Out} {
		if strings.TrimSpace(v) == "" {
			return fmt.Errorf("--%s must not be empty", name)
		}
	}
	if set["perfdata"] {
		dir, err := preparePerfDataDir(o.PerfData)
		if err != nil {
			return err
		}
		o.PerfData = dir
	}
	return nil
}

// Autoscalers are --autoscaler's values.
var Autoscalers = []string{"auto", "karpenter", "cluster-autoscaler", "none"}

func (o *RunOptions) validateAutoscaler() error {
	if !slices.Contains(Autoscalers, o.Autoscaler) {
		return fmt.Errorf("--autoscaler=%q: want %s", o.Autoscaler, strings.Join(Autoscalers, ", "))
	}
	switch {
	case o.Profile != "cluster" && o.Autoscaler == "cluster-autoscaler":
		return fmt.Errorf("--autoscaler=cluster-autoscaler: the %s testbed cannot run it (the local testbed runs karpenter)", o.Profile)
	case o.Profile == "kind" && o.Autoscaler == "karpenter":
		return errors.New("--autoscaler=karpenter: the kind testbed runs no autoscaler (the local testbed does: --profile=local)")
	case o.MaxNewNodes < 0 || o.MaxExtraNodes < 0:
		return fmt.Errorf("--max-new-nodes and --max-extra-nodes must not be negative, got %d and %d", o.MaxNewNodes, o.MaxExtraNodes)
	}
	if o.NodePool != "" {
		if msgs := validation.IsDNS1123Subdomain(o.NodePool); len(msgs) > 0 {
			return fmt.Errorf("--nodepool=%q: not a NodePool name: %s", o.NodePool, strings.Join(msgs, "; "))
		}
	}
	return nil
}

// NoAutoscaler says the run knows, from its flags, that its cluster has no
// node autoscaler: none, or auto on a testbed (which runs one only when
// told). auto on a cluster is resolved at setup.
func (o *RunOptions) NoAutoscaler() bool {
	return o.Autoscaler == "none" || (o.Profile != "cluster" && o.Autoscaler == "auto")
}

// validatePrometheusFiles reads --prometheus-url's token and CA files now,
// so a typo fails the run before it touches a cluster, not at the one
// assessment that queries Prometheus. The token is not kept.
func (o *RunOptions) validatePrometheusFiles() error {
	for _, f := range []struct{ name, v string }{{"prometheus-bearer-token-file", o.PrometheusBearerTokenFile}, {"prometheus-ca-file", o.PrometheusCAFile}} {
		if f.v != "" && o.PrometheusURL == "" {
			return fmt.Errorf("--%s is for --prometheus-url, which is not given", f.name)
		}
	}
	if o.PrometheusBearerTokenFile != "" {
		if _, err := measure.ReadBearerToken(o.PrometheusBearerTokenFile); err != nil {
			return fmt.Errorf("--prometheus-bearer-token-file: %w", err)
		}
	}
	if o.PrometheusCAFile != "" {
		// Only TLS reads it: given with http:// it would be ignored.
		if u, err := url.Parse(o.PrometheusURL); err != nil || u.Scheme != "https" {
			return fmt.Errorf("--prometheus-ca-file is for an https:// --prometheus-url, not %q", o.PrometheusURL)
		}
		if _, err := measure.LoadCAFile(o.PrometheusCAFile); err != nil {
			return fmt.Errorf("--prometheus-ca-file: %w", err)
		}
	}
	return nil
}
