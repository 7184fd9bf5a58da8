package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpulab/gpulab/conformance/profile"
	"github.com/gpulab/gpulab/conformance/results"
	"github.com/gpulab/gpulab/internal/scheme"
)

// A baseline set on a cluster is one ConfigMap, labelled BaselineSetLabel,
// holding the manifest and each run's results.json under its own key.
//
// Why a ConfigMap and not a PVC: it needs no StorageClass (many GPU
// clusters' runner namespaces have none, or only node-local ones a
// CronJob's next pod may not reach), one update replaces the whole set
// atomically (a failure leaves the old set whole), the shipped runner Role
// already grants get/create/update on ConfigMaps in its namespace, and a
// set is small: a run's results without timelines is tens of KiB, so ten
// runs stay far below the API server's 1 MiB.
const (
	// BaselineSetLabel marks a ConfigMap as a baseline set; its value is
	// the set's name (kubectl get cm -l conformance.gpulab.io/baseline-set).
	BaselineSetLabel = "conformance.gpulab.io/baseline-set"
	// configMapSource prefixes --baseline and --to values that name one.
	configMapSource = "configmap:"
	// maxBaselineBytes leaves room under the API server's 1 MiB object limit.
	maxBaselineBytes = 900 << 10
)

// runKey is where run i (from 1) of a set lives in the ConfigMap.
func runKey(i int) string { return fmt.Sprintf("run-%d.%s", i, results.ResultsFile) }

// configMapStore keeps a baseline set in the ConfigMap namespace/name.
type configMapStore struct {
	namespace, name string
	// connect returns the client; tests give a fake one.
	connect func() (client.Client, error)
}

// parseConfigMapSource reads configmap:NAMESPACE/NAME.
func parseConfigMapSource(src string) (namespace, name string, err error) {
	ns, name, ok := strings.Cut(strings.TrimPrefix(src, configMapSource), "/")
	if !ok || ns == "" || name == "" {
		return "", "", fmt.Errorf("%q: want configmap:NAMESPACE/NAME", src)
	}
	if msgs := append(validation.IsDNS1123Label(ns), validation.IsDNS1123Subdomain(name)...); len(msgs) > 0 {
		return "", "", fmt.Errorf("%q: %s", src, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsValidLabelValue(name); len(msgs) > 0 {
		return "", "", fmt.Errorf("%q: the name is the %s label's value: %s", src, BaselineSetLabel, strings.Join(msgs, "; "))
	}
	return ns, name, nil
}

// newConfigMapStore connects, when first used, through kubeconfig and
// context (empty: $KUBECONFIG, ~/.kube/config, else in-cluster).
func newConfigMapStore(src, kubeconfig, kubeContext string) (*configMapStore, error) {
	ns, name, err := parseConfigMapSource(src)
	if err != nil {
		return nil, err
	}
	return &configMapStore{namespace: ns, name: name, connect: func() (client.Client, error) {
		cfg, _, err := profile.LoadConfig(kubeconfig, kubeContext)
		if err != nil {
			return nil, err
		}
		return client.New(cfg, client.Options{Scheme: scheme.Scheme})
	}}, nil
}

func (s *configMapStore) String() string { return configMapSource + s.namespace + "/" + s.name }

// Load reads the set, writing it under scratch as a baseline directory
// (kept with the night's output: what it was compared with).
func (s *configMapStore) Load(ctx context.Context, scratch string) ([]results.Run, error) {
	c, err := s.connect()
	if err != nil {
		return nil, fmt.Errorf("reading the baseline %s: %w", s, err)
	}
	var cm corev1.ConfigMap
	switch err := c.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: s.name}, &cm); {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("%s: %w", s, errNoBaseline)
	case err != nil:
		return nil, fmt.Errorf("reading the baseline %s: %w", s, err)
	}
	if cm.Labels[BaselineSetLabel] != s.name {
		return nil, fmt.Errorf("%s is not a baseline set (no label %s=%s)", s, BaselineSetLabel, s.name)
	}
	var keys []string
	for k := range cm.Data {
		if strings.HasSuffix(k, "."+results.ResultsFile) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s holds no runs: %w", s, errNoBaseline)
	}
	sort.Strings(keys)
	if err := os.RemoveAll(scratch); err != nil {
		return nil, fmt.Errorf("reading the baseline %s: %w", s, err)
	}
	for _, k := range keys {
		dir := filepath.Join(scratch, strings.TrimSuffix(k, "."+results.ResultsFile))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("reading the baseline %s: %w", s, err)
		}
		if err := os.WriteFile(filepath.Join(dir, results.ResultsFile), []byte(cm.Data[k]), 0o644); err != nil {
			return nil, fmt.Errorf("reading the baseline %s: %w", s, err)
		}
	}
	if m, ok := cm.Data[results.BaselineManifestFile]; ok {
		if err := os.WriteFile(filepath.Join(scratch, results.BaselineManifestFile), []byte(m), 0o644); err != nil {
			return nil, fmt.Errorf("reading the baseline %s: %w", s, err)
		}
	}
	runs, _, err := results.ReadRuns(scratch)
	if err != nil {
		return nil, fmt.Errorf("reading the baseline %s: %w", s, err)
	}
	return runs, nil
}

// Save replaces the set with one update (or creates it). An existing
// ConfigMap of that name that is not a baseline set is never replaced.
func (s *configMapStore) Save(ctx context.Context, runs []results.Run, set []*results.Results, now time.Time) (results.BaselineManifest, error) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.namespace, Name: s.name,
		Labels: map[string]string{"app.kubernetes.io/name": "gpulab-conformance", BaselineSetLabel: s.name}},
		Data: map[string]string{}}
	paths := make([]string, len(set))
	size := 0
	for i, base := range set {
		paths[i] = runKey(i + 1)
		data, err := json.MarshalIndent(base, "", " ")
		if err != nil {
			return results.BaselineManifest{}, fmt.Errorf("encoding the baseline's run %d: %w", i+1, err)
		}
		cm.Data[paths[i]] = string(data)
		size += len(data)
	}
	m := results.NewBaselineManifest(runs, paths, now)
	data, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return m, fmt.Errorf("encoding the baseline manifest: %w", err)
	}
	cm.Data[results.BaselineManifestFile] = string(data)
	if size += len(data); size > maxBaselineBytes {
		return m, fmt.Errorf("the baseline set is %d KiB, more than a ConfigMap holds (%d KiB): promote fewer runs", size>>10, maxBaselineBytes>>10)
	}
	c, err := s.connect()
	if err != nil {
		return m, fmt.Errorf("writing the baseline %s: %w", s, err)
	}
	var old corev1.ConfigMap
	switch err := c.Get(ctx, client.ObjectKeyFromObject(cm), &old); {
	case apierrors.IsNotFound(err):
		err = c.Create(ctx, cm)
		if err != nil {
			return m, fmt.Errorf("writing the baseline %s: %w", s, err)
		}
		return m, nil
	case err != nil:
		return m, fmt.Errorf("writing the baseline %s: %w", s, err)
	case old.Labels[BaselineSetLabel] != s.name:
		return m, fmt.Errorf("%s exists and is not a baseline set (no label %s=%s): not replacing it", s, BaselineSetLabel, s.name)
	}
	cm.ResourceVersion = old.ResourceVersion // a concurrent writer makes this a conflict, not a lost set
	if err := c.Update(ctx, cm); err != nil {
		return m, fmt.Errorf("writing the baseline %s: %w", s, err)
	}
	return m, nil
}
