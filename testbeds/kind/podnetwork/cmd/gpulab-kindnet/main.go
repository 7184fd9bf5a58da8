// Command gpulab-kindnet runs the kind testbed's pod network on one node
// (package podnetwork), as a host-network DaemonSet pod.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpulab/gpulab/testbeds/kind/podnetwork"
)

func main() {
	node := flag.String("node-name", os.Getenv("NODE_NAME"), "this node's name [$NODE_NAME]")
	dir := flag.String("cni-config-dir", "/etc/cni/net.d", "where the CNI config is written")
	interval := flag.Duration("interval", 10*time.Second, "time between syncs")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *node, *dir, *interval)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpulab-kindnet:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, node, dir string, interval time.Duration) error {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return podnetwork.Run(ctx, podnetwork.Options{NodeName: node, Client: client, ConfigDir: dir, Interval: interval, Log: os.Stdout})
}
