package gang_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpulab/gpulab/internal/gang"
	"github.com/gpulab/gpulab/internal/gang/gangtest"
)

// TestHeadServicePortNames: the head Service's ports get unique, valid
// names, also for an unnamed port open on TCP and UDP (one name for both
// made the Service invalid, and the gang waited on it), and a port two
// containers declare alike is listed once.
func TestHeadServicePortNames(t *testing.T) {
	c := gangtest.Cluster()
	c.Spec.Head.Template.Spec.Containers = []corev1.Container{
		{Name: "a", Ports: []corev1.ContainerPort{
			{ContainerPort: 29500, Protocol: corev1.ProtocolTCP},
			{ContainerPort: 29500, Protocol: corev1.ProtocolUDP},
			{ContainerPort: 65535, Protocol: corev1.ProtocolSCTP},
			{Name: "dashboard", ContainerPort: 8265},
		}},
		{Name: "b", Ports: []corev1.ContainerPort{
			{ContainerPort: 29500, Protocol: corev1.ProtocolTCP},
			{Name: "dashboard", ContainerPort: 8266},
		}},
	}
	ports := gang.HeadService(c).Spec.Ports
	names := map[string]bool{}
	type key struct {
		port     int32
		protocol corev1.Protocol
	}
	seen := map[key]bool{}
	for _, p := range ports {
		if errs := validation.IsValidPortName(p.Name); len(errs) > 0 {
			t.Errorf("port %d/%s: name %q is invalid: %v", p.Port, p.Protocol, p.Name, errs)
		}
		if names[p.Name] {
			t.Errorf("port name %q used twice: %+v", p.Name, ports)
		}
		names[p.Name] = true
		k := key{p.Port, p.Protocol}
		if p.Protocol == "" {
			k.protocol = corev1.ProtocolTCP
		}
		if seen[k] {
			t.Errorf("port %d/%s listed twice: %+v", p.Port, k.protocol, ports)
		}
		seen[k] = true
	}
	if len(ports) != 5 {
		t.Errorf("%d ports, want 5 (29500/TCP, 29500/UDP, 65535/SCTP, 8265, 8266): %+v", len(ports), ports)
	}
}
