package podnetwork

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func node(name, cidr, ip string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{PodCIDR: cidr}}
	if cidr != "" {
		n.Spec.PodCIDRs = []string{cidr}
	}
	if ip != "" {
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeInternalIP, Address: ip}}
	}
	return n
}

func TestRoutesGoThroughEachOtherNode(t *testing.T) {
	nodes := []corev1.Node{
		node("w2", "10.244.2.0/24", "172.18.0.4"),
		node("cp", "10.244.0.0/24", "172.18.0.2"),
		node("w1", "10.244.1.0/24", "172.18.0.3"),
		node("new", "", "172.18.0.5"),                // no podCIDR yet
		node("noip", "10.244.9.0/24", ""),            // no address yet
		node("v6", "fd00:10:244::/64", "172.18.0.6"), // no IPv6 address to route it by
	}
	got := Routes("w1", nodes)
	want := []string{"10.244.0.0/24 via 172.18.0.2", "10.244.2.0/24 via 172.18.0.4"}
	if len(got) != len(want) {
		t.Fatalf("Routes = %v, want %v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("route %d = %s, want %s", i, got[i], want[i])
		}
	}
}

func TestConfigUsesThePodCIDR(t *testing.T) {
	data, err := Config("10.244.1.0/24", 1400)
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		CNIVersion string `json:"cniVersion"`
		Plugins    []struct {
			Type string `json:"type"`
			MTU  int    `json:"mtu"`
			IPAM struct {
				Type   string                `json:"type"`
				Ranges [][]map[string]string `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &conf); err != nil {
		t.Fatal(err)
	}
	if len(conf.Plugins) != 2 || conf.Plugins[0].Type != "ptp" || conf.Plugins[1].Type != "portmap" {
		t.Fatalf("plugins = %+v, want ptp then portmap", conf.Plugins)
	}
	p := conf.Plugins[0]
	if p.IPAM.Type != "host-local" || p.IPAM.Ranges[0][0]["subnet"] != "10.244.1.0/24" || p.MTU != 1400 {
		t.Errorf("ptp = %+v", p)
	}
	if _, err := Config("not-a-cidr", 0); err == nil {
		t.Error("a bad podCIDR was accepted")
	}
}
