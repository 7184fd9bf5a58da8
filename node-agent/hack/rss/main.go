// Command rss measures the resident memory of a built gpulab-agent in mock
// mode against a real API server (envtest, from the testbed's binaries):
//
//	go run ./node-agent/hack/rss --agent=bin/gpulab-agent                    # one node
//	go run ./node-agent/hack/rss --agent=bin/gpulab-agent --fleet=dgx-h100=100 # fleet simulation
//
// It waits until every node's GPUInventory exists, lets the agent rescan for
// --settle, and prints the agent's VmRSS and VmHWM from /proc.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/gpulab/gpulab/api/v1alpha1"
	"github.com/gpulab/gpulab/testbeds/envtest"
	"github.com/gpulab/gpulab/testbeds/local"
)

func main() {
	agent := flag.String("agent", "bin/gpulab-agent", "gpulab-agent binary")
	fleetSpec := flag.String("fleet", "", "simulate this fleet (profile=count,...) instead of one dgx-h100 node")
	settle := flag.Duration("settle", 10*time.Second, "time to let the agent run after publishing")
	flag.Parse()
	if err := run(*agent, *fleetSpec, *settle); err != nil {
		fmt.Fprintln(os.Stderr, "rss:", err)
		os.Exit(1)
	}
}

func run(agent, fleetSpec string, settle time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env, err := envtest.Start(ctx, envtest.Options{})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	spec := fleetSpec
	if spec == "" {
		spec = "dgx-h100=1"
	}
	fleet, err := local.ParseFleet(spec)
	if err != nil {
		return err
	}
	nodes := fleet.Nodes()
	for _, n := range nodes {
		if err := env.Client.Create(ctx, n); err != nil {
			return err
		}
	}
	dir, err := os.MkdirTemp("", "gpulab-rss")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: env.Config.CertData, ClientKeyData: env.Config.KeyData}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		return err
	}
	args := []string{"--kubeconfig=" + kubeconfig, "--metrics-bind-address=127.0.0.1:0", "--interval=2s"}
	if fleetSpec != "" {
		args = append(args, "--simulate-testbed-nodes")
	} else {
		args = append(args, "--nvml=mock:dgx-h100", "--node-name="+nodes[0].Name)
	}
	cmd := exec.CommandContext(ctx, agent, args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	start := time.Now()
	for {
		var l v1alpha1.GPUInventoryList
		if err := env.Client.List(ctx, &l); err != nil {
			return err
		}
		if len(l.Items) == len(nodes) {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(100 * time.Millisecond)
	}
	published := time.Since(start)
	time.Sleep(settle) // let the agent rescan at its interval
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "nodes=%d published_in=%s", len(nodes), published.Round(time.Millisecond))
	for line := range strings.SplitSeq(string(status), "\n") {
		if strings.HasPrefix(line, "VmRSS") || strings.HasPrefix(line, "VmHWM") {
			fmt.Fprintf(os.Stdout, " %s", strings.Join(strings.Fields(line), ""))
		}
	}
	fmt.Println()
	if rollup, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", cmd.Process.Pid)); err == nil {
		for line := range strings.SplitSeq(string(rollup), "\n") {
			if strings.HasPrefix(line, "Anonymous") || strings.HasPrefix(line, "Rss") {
				fmt.Println("  " + strings.Join(strings.Fields(line), " "))
			}
		}
	}
	return nil
}
