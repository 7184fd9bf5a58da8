package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpulab/gpulab/internal/repo"
	"github.com/gpulab/gpulab/testbeds/binaries"
	"github.com/gpulab/gpulab/testbeds/kind"
	"github.com/gpulab/gpulab/testbeds/kind/dockerhost"
	"github.com/gpulab/gpulab/testbeds/kind/nodeimage"
)

// kindCommands are the commands of the kind testbed (Docker hosts), with
// their own flags.
var kindCommands = map[string]bool{
	"docker-up": true, "docker-down": true, "kind-build": true, "kind-image": true, "images": true,
	"kind-up": true, "kind-down": true, "kind-logs": true,
}

const kindUsage = `
kind testbed commands (need Docker; run as root to start dockerd or build the base image):
  docker-up    use the Docker daemon that answers, or start dockerd (with the
               capability shim where the bounding set is short) and leave it running
  docker-down  stop the dockerd that docker-up started
  kind-build   build a kind node's programs from the Go module proxy (cached)
  kind-image   build the kind node image and its component images (cached)
  images       build the gpulab-conformance image (the in-cluster runner), tagged
               dev and with VERSION
  kind-up      create a kind cluster from that image and install Volcano and gpulab
               (--name, --workers, --profile, --cluster-only, --reuse,
               --volcano-version, --gpu-allocation); a cluster of that name is
               never deleted
  kind-down    delete the kind cluster, if gpulab created it
  kind-logs    export the kind cluster's node logs (--dir)
`

func runKind(ctx context.Context, cmd string, args []string) error {
	fs := flag.NewFlagSet("gpulab-testbed "+cmd, flag.ContinueOnError)
	cache := fs.String("cache-dir", "", "cache for binaries, images and Docker state (default $GPULAB_CACHE or ${XDG_CACHE_HOME:-$HOME/.cache}/gpulab)")
	name := fs.String("name", "gpulab", "kind cluster name, a DNS-1123 label")
	workers := fs.Int("workers", 4, "kind-up: worker nodes")
	profile := fs.String("profile", kind.DefaultWorkerProfile, "kind-up: the node profile the workers play")
	timeout := fs.Duration("timeout", 5*time.Minute, "kind-up: how long to wait for nodes, CoreDNS and the pod network")
	reuse := fs.Bool("reuse", false, "kind-up: use a cluster of --name that gpulab created earlier as it is (a cluster of that name is never deleted; one gpulab did not create is refused)")
	clusterOnly := fs.Bool("cluster-only", false, "kind-up: create the cluster without installing Volcano and gpulab")
	dir := fs.String("dir", "", "kind-logs: where to export (default <repo>/_artifacts/kind-<name>)")
	volcanoVersion := fs.String("volcano-version", "", volcanoVersionUsage)
	allocation := fs.String("gpu-allocation", kind.GPUAllocationDevicePlugin,
		"kind-up: how the agent hands the workers' mock GPUs to the kubelet: "+kind.GPUAllocationDevicePlugin+" (nvidia.com/gpu) or "+
			kind.GPUAllocationDRA+" (its DRA kubelet plugin; claims of DeviceClass gpu.gpulab.io)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if _, err := binaries.ResolveVolcanoVersion(*volcanoVersion); err != nil {
		return fmt.Errorf("--volcano-version: %w", err)
	}
	if *workers < 0 {
		return fmt.Errorf("--workers must not be negative, got %d", *workers)
	}
	cacheDir := *cache
	if cacheDir == "" {
		var err error
		if cacheDir, err = binaries.DefaultCacheDir(); err != nil {
			return err
		}
	}
	stateDir := kind.DockerStateDir(cacheDir)
	// Every command talks to the dockerd docker-up started, if it runs.
	if _, err := dockerhost.UseStarted(stateDir); err != nil {
		return err
	}
	switch cmd {
	case "kind-build":
		opts := binaries.Options{CacheDir: cacheDir, Log: os.Stdout, VolcanoVersion: *volcanoVersion}
		if _, err := binaries.Ensure(ctx, opts); err != nil {
			return err
		}
		_, err := binaries.EnsureKind(ctx, opts)
		return err
	case "kind-image":
		root, err := repo.Root()
		if err != nil {
			return err
		}
		if _, err := dockerhost.Ensure(ctx, dockerhost.Options{StateDir: stateDir, RepoRoot: root, Log: os.Stdout}); err != nil {
			return err
		}
		start := time.Now()
		res, err := nodeimage.Build(ctx, nodeimage.Options{CacheDir: cacheDir, RepoRoot: root, Log: os.Stdout})
		if err != nil {
			return err
		}
		fmt.Printf("node image %s (built: %t, %s)\n", res.Ref, res.Built, time.Since(start).Round(time.Second))
		return nil
	case "images":
		root, err := repo.Root()
		if err != nil {
			return err
		}
		if _, err := dockerhost.Ensure(ctx, dockerhost.Options{StateDir: stateDir, RepoRoot: root, Log: os.Stdout}); err != nil {
			return err
		}
		refs, err := kind.BuildConformanceImage(ctx, cacheDir, root, os.Stdout)
		if err != nil {
			return err
		}
		fmt.Printf("built %s\n", strings.Join(refs, ", "))
		return nil
	case "docker-up":
		root, err := repo.Root()
		if err != nil {
			return err
		}
		d, err := dockerhost.Ensure(ctx, dockerhost.Options{StateDir: stateDir, RepoRoot: root, Log: os.Stdout})
		if err != nil {
			return err
		}
		if d.PID != 0 {
			fmt.Printf("dockerd PID %d (shim: %t), log %s\n", d.PID, d.Shim, d.Log)
		} else {
			fmt.Printf("using the Docker daemon already running (shim: %t)\n", d.Shim)
		}
		return nil
	case "docker-down":
		pid, err := dockerhost.Stop(ctx, stateDir, 60*time.Second)
		if err != nil {
			return err
		}
		if pid == 0 {
			fmt.Println("no dockerd started by docker-up is running")
		} else {
			fmt.Printf("dockerd (PID %d) stopped\n", pid)
		}
		return nil
	}
	c, err := kind.New(ctx, kind.Options{Name: *name, CacheDir: cacheDir, Workers: *workers, WorkerProfile: *profile, ReadyTimeout: *timeout, Log: os.Stdout, Reuse: *reuse, VolcanoVersion: *volcanoVersion, GPUAllocation: *allocation})
	if err != nil {
		return err
	}
	switch cmd {
	case "kind-up":
		up := c.Up
		if *clusterOnly {
			up = c.Create
		}
		if err := up(ctx); err != nil {
			return err
		}
		fmt.Printf("kind cluster %q is up; export KUBECONFIG=%s\n", c.Name(), c.Kubeconfig())
		return nil
	case "kind-down":
		if err := c.Down(ctx); err != nil {
			return err
		}
		fmt.Printf("kind cluster %q is deleted\n", c.Name())
		return nil
	case "kind-logs":
		out := *dir
		if out == "" {
			root, err := repo.Root()
			if err != nil {
				return err
			}
			out = filepath.Join(root, "_artifacts", "kind-"+c.Name())
		}
		if err := c.CollectLogs(ctx, out); err != nil {
			return err
		}
		fmt.Printf("logs of kind cluster %q in %s\n", c.Name(), out)
		return nil
	}
	return fmt.Errorf("unknown kind command %q", cmd)
}
