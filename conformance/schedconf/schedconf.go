// Package schedconf reads Volcano's scheduler configuration, where a
// cluster lets the suite see it, for what would let the run's own
// over-capacity gangs disrupt other tenants: the reclaim action (a queue
// under its share takes resources back from others' pods) and the preempt
// action (a pending gang evicts lower-priority pods). With either on, the
// suite runs its over-capacity scenarios only with --disruptive.
package schedconf

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

const (
	// ConfigMapName is where Volcano's installer keeps the scheduler
	// configuration (its Helm chart and manifests alike).
	ConfigMapName = "volcano-scheduler-configmap"
	// Key is the configuration's key in that ConfigMap.
	Key = "volcano-scheduler.conf"
	// DefaultNamespace is Volcano's installer's namespace.
	DefaultNamespace = "volcano-system"
)

// disruptive are the actions that take resources from running pods.
var disruptive = []string{"reclaim", "preempt"}

// Evicting lists the actions of a scheduler configuration that can evict
// running pods (reclaim, preempt), in its order.
func Evicting(conf string) ([]string, error) {
	var c struct {
		Actions string `json:"actions"`
	}
	if err := yaml.Unmarshal([]byte(conf), &c); err != nil {
		return nil, fmt.Errorf("reading Volcano's scheduler configuration: %w", err)
	}
	if strings.TrimSpace(c.Actions) == "" {
		return nil, errors.New("the scheduler configuration names no actions")
	}
	var out []string
	for a := range strings.SplitSeq(c.Actions, ",") {
		a = strings.TrimSpace(a)
		for _, d := range disruptive {
			if a == d {
				out = append(out, a)
			}
		}
	}
	return out, nil
}

// Read reads the configuration from the cluster: the actions that can
// evict, or an error saying why it is not visible (absent elsewhere,
// Forbidden).
func Read(ctx context.Context, c client.Client, namespace string) ([]string, error) {
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ConfigMapName}, &cm); err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s: %w", namespace, ConfigMapName, err)
	}
	conf, ok := cm.Data[Key]
	if !ok {
		return nil, fmt.Errorf("ConfigMap %s/%s has no %s", namespace, ConfigMapName, Key)
	}
	return Evicting(conf)
}
