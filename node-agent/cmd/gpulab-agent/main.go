// Command gpulab-agent is gpulab's node agent: it reads the node's GPUs over
// NVML and publishes them as a GPUInventory, GPU Feature Discovery node labels
// and per-GPU metrics. See node-agent/README.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpulab/gpulab/internal/version"
	"github.com/gpulab/gpulab/node-agent/internal/cli"
)

func main() {
	// --version is answered before the command line is parsed, so it works
	// whatever else the agent's flags would refuse.
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-version") {
		fmt.Println("gpulab-agent", version.Get())
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
