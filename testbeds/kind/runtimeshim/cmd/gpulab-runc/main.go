// Command gpulab-runc is an OCI runtime for dockerd (--add-runtime) that
// drops the capabilities the host's bounding set lacks from the process
// spec, then execs runc with the same arguments (see package runtimeshim).
package main

import (
	"fmt"
	"os"
	"syscall"

	"github.com/gpulab/gpulab/testbeds/kind/runtimeshim"
)

// runcPath is the runc the shim hands over to; the testbed stamps the one it
// found on the host in at build time (-X main.runcPath=...).
var runcPath = "/usr/sbin/runc"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gpulab-runc:", err)
		os.Exit(1)
	}
}

func run() error {
	args := os.Args[1:]
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	if path, field, ok := runtimeshim.SpecFile(args, wd); ok {
		allowed, err := runtimeshim.Bounding("/proc/self/status")
		if err != nil {
			return err
		}
		if err := runtimeshim.FilterFile(path, field, allowed); err != nil {
			return err
		}
	}
	return syscall.Exec(runcPath, append([]string{runcPath}, args...), os.Environ())
}
