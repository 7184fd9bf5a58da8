package binaries

import (
	"context"
	"strings"
)

// kwok and kwokctl install straight from the proxy; the version ldflags make
// `kwokctl --version` honest and set the Kubernetes version it assumes.
var kwok = component{
	name:     "kwok",
	version:  KwokVersion,
	binaries: []string{"kwok", "kwokctl"},
	build: func(ctx context.Context, b *builder, out string) error {
		ldflags := append([]string{"-s", "-w"}, ldflagsX("sigs.k8s.io/kwok/pkg/consts", map[string]string{
			"Version":     KwokVersion,
			"KubeVersion": KubernetesVersion,
		})...)
		return b.goCmd(ctx, out, "kwok", []string{"GOBIN=" + out}, "install", "-trimpath",
			"-ldflags="+strings.Join(ldflags, " "),
			"sigs.k8s.io/kwok/cmd/kwok@"+KwokVersion, "sigs.k8s.io/kwok/cmd/kwokctl@"+KwokVersion)
	},
}
